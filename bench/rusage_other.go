//go:build !unix

package bench

import "errors"

// selfUsage is not implemented here: the report leaves client CPU out.
func selfUsage() (procUsage, error) {
	return procUsage{}, errors.New("getrusage is not available on this system")
}

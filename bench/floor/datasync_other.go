//go:build !linux

package floor

import "os"

// datasync falls back to a full fsync where fdatasync is not offered.
func datasync(f *os.File) error { return f.Sync() }

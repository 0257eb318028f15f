//go:build !linux

package transport

// quickAck is Linux's TCP_QUICKACK; elsewhere the delayed ACK stays.
func quickAck(uintptr) {}

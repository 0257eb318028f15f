package floor

import (
	"os"
	"syscall"
)

// datasync flushes f's data, and only the metadata needed to read it back.
func datasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }

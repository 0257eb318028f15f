package log

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrLocked is returned by LockDir when another process holds the lock.
var ErrLocked = errors.New("data directory in use")

// DirLock is an exclusive advisory lock on a data directory: the server
// holds it while it runs, and the offline tools that change a directory
// take it, so two writers never share one. The kernel drops it when the
// process dies, however it dies.
type DirLock struct{ f *os.File }

// LockDir locks dir (creating it and its LOCK file if needed) and records
// this process's pid in the file. It fails with ErrLocked, naming the
// holder's pid, if another process holds it.
func LockDir(dir string) (*DirLock, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			if pid := strings.TrimSpace(string(holder)); pid != "" {
				return nil, fmt.Errorf("%w: %s is locked by process %s (is walbus serve running?)", ErrLocked, dir, pid)
			}
			return nil, fmt.Errorf("%w: %s is locked by another process (is walbus serve running?)", ErrLocked, dir)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &DirLock{f: f}, nil
}

// Unlock releases the lock.
func (l *DirLock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the descriptor drops the flock
	l.f = nil
	return err
}

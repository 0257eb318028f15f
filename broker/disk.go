package broker

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/walbus/walbus/broker/layout"
)

// A full disk. The broker keeps an emergency reserve: a file of
// Options.DiskReserve bytes in the data directory (a ballast, as
// CockroachDB keeps one). While the file system's free space is below the
// reserve's size, or once a write has failed for space, the disk is low:
// the reserve is deleted, new messages (sends, schedules, forwards) are
// refused at once with ErrDiskLow, and everything else goes on (receives,
// peeks, settlements, renewals, deletes), each writing a few bytes into the
// space the reserve gave back, so consumers can drain the broker. Once free
// space is three times the reserve again (12 MiB without a reserve), the
// reserve is written back and new messages are taken again.

// ErrDiskLow refuses a new message while the disk is low. It wraps
// syscall.ENOSPC, which the protocol layer reports as a full disk.
var ErrDiskLow = fmt.Errorf("the disk is nearly full: new messages are refused until space is freed (%w)", syscall.ENOSPC)

// DefaultDiskReserve is Options.DiskReserve's default.
const DefaultDiskReserve = 64 << 20

// diskGuard watches free space and keeps the reserve.
type diskGuard struct {
	b    *Broker
	path string // the reserve file
	size int64  // its size; 0: no reserve (the low state is still kept)
	free func() (uint64, error)

	low    atomic.Bool
	reason atomic.Pointer[string]
	kick   chan struct{}
	// written counts bytes the logs wrote since the last check; a check
	// comes early once they could have used half the space left over the
	// reserve (soon is the threshold's copy, for the writers).
	written atomic.Int64
	soon    atomic.Int64

	mu       sync.Mutex
	lastFree uint64
	held     bool // the reserve file exists at its size
}

// DiskState is what the broker knows of its disk.
type DiskState struct {
	Low         bool   // new messages are refused
	Reason      string // why, when Low
	Free        uint64 // free bytes at the last check
	Reserve     int64  // the reserve's size
	ReserveHeld bool   // the reserve file is in place
	ReservePath string // where it is
}

func newDiskGuard(b *Broker) *diskGuard {
	g := &diskGuard{b: b, path: filepath.Join(b.opts.Dir, layout.Reserve), size: max(b.opts.DiskReserve, 0),
		free: b.opts.DiskFree, kick: make(chan struct{}, 1)}
	g.soon.Store(math.MaxInt64) // until the first check
	if g.free == nil {
		g.free = func() (uint64, error) { return freeBytes(b.opts.Dir) }
	}
	return g
}

// start takes the reserve and watches until the broker closes.
func (g *diskGuard) start() {
	g.check()
	go func() {
		t := time.NewTicker(g.b.opts.DiskCheck)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-g.kick:
			case <-g.b.quit:
				return
			}
			g.check()
		}
	}()
}

// wrote counts n bytes a log wrote; enough of them bring the next check
// forward.
func (g *diskGuard) wrote(n int) {
	if g.written.Add(int64(n)) >= g.soon.Load() {
		select {
		case g.kick <- struct{}{}:
		default:
		}
	}
}

// failed is told of a write that failed: one for space makes the disk low
// at once, before the next check.
func (g *diskGuard) failed(err error) {
	if !errors.Is(err, syscall.ENOSPC) {
		return
	}
	g.goLow("a write failed: the disk is full")
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// goLow makes the disk low and gives the reserve back.
func (g *diskGuard) goLow(reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.low.Load() {
		return
	}
	g.reason.Store(&reason)
	g.low.Store(true)
	released := g.held
	if g.held {
		if err := os.Remove(g.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			g.b.logger.Error("cannot delete the disk reserve", "path", g.path, "err", err)
		}
		g.held = false
	}
	g.b.logger.Warn("disk low: new messages are refused; receives, settlements and deletes go on",
		"reason", reason, "free_bytes", g.lastFree, "reserve_released", released, "reserve_bytes", g.size)
}

// check reads the free space and moves between the states.
func (g *diskGuard) check() {
	free, err := g.free()
	if err != nil {
		g.b.logger.Warn("cannot read the data directory's free space", "err", err)
		return
	}
	g.written.Store(0)
	over := int64(free) - g.margin()
	g.soon.Store(max(over/2, 64<<10))
	g.mu.Lock()
	g.lastFree = free
	low, held := g.low.Load(), g.held
	g.mu.Unlock()
	switch {
	case !low && !held && g.size > 0:
		// At the start, or after a reserve that could not be written.
		if free < uint64(g.size)*2 || !g.takeReserve() {
			g.goLow(fmt.Sprintf("%d bytes free, too few to keep the %d-byte reserve", free, g.size))
		}
	case !low && free < uint64(g.size):
		g.goLow(fmt.Sprintf("%d bytes free, under the %d-byte reserve", free, g.size))
	case low && free >= 3*uint64(g.margin()) && (g.size == 0 || g.takeReserve()):
		g.mu.Lock()
		g.low.Store(false)
		g.mu.Unlock()
		g.b.logger.Info("disk has room again: new messages are taken", "free_bytes", free, "reserve_bytes", g.size)
	}
}

// margin is the reserve's size, or without a reserve noReserveMargin: the
// disk is low until three times that is free.
func (g *diskGuard) margin() int64 {
	if g.size > 0 {
		return g.size
	}
	return noReserveMargin
}

// noReserveMargin stands for the reserve when there is none.
const noReserveMargin = 4 << 20

// takeReserve writes the reserve file and reports whether it is whole.
func (g *diskGuard) takeReserve() bool {
	if err := writeReserve(g.path, g.size); err != nil {
		g.b.logger.Warn("cannot write the disk reserve", "path", g.path, "bytes", g.size, "err", err)
		os.Remove(g.path)
		return false
	}
	g.mu.Lock()
	g.held = true
	g.mu.Unlock()
	return true
}

// writeReserve writes size zero bytes to path, really allocated (a sparse
// file would reserve nothing), and syncs them.
func writeReserve(path string, size int64) error {
	if st, err := os.Stat(path); err == nil && st.Size() == size {
		return nil // from the last run
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	chunk := make([]byte, min(size, 1<<20))
	for left := size; left > 0; left -= int64(len(chunk)) {
		if _, err := f.Write(chunk[:min(left, int64(len(chunk)))]); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// freeBytes is the space an unprivileged writer may still use in dir.
func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// state reports the guard's state.
func (g *diskGuard) state() DiskState {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := DiskState{Low: g.low.Load(), Free: g.lastFree, Reserve: g.size, ReserveHeld: g.held, ReservePath: g.path}
	if st.Low {
		if r := g.reason.Load(); r != nil {
			st.Reason = *r
		}
	}
	return st
}

// Disk reports the data directory's free space and whether new messages
// are refused for lack of it.
func (b *Broker) Disk() DiskState {
	if g := b.diskGuard(); g != nil {
		return g.state()
	}
	return DiskState{}
}

// refuseNew is ErrDiskLow while the disk is low.
func (b *Broker) refuseNew() error {
	if g := b.diskGuard(); g != nil && g.low.Load() {
		return ErrDiskLow
	}
	return nil
}

// writeFailed tells the disk guard of a log write that failed.
func (b *Broker) writeFailed(err error) {
	if g := b.diskGuard(); g != nil {
		g.failed(err)
	}
}

func (b *Broker) diskGuard() *diskGuard { return b.disk.Load() }

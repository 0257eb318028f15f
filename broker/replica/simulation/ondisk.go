package simulation

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/walbus/walbus/broker/replica"
	"github.com/walbus/walbus/log"
)

// OnDisk makes each member's storage a replica.LogStorage in a directory
// of its own under dir: the group's Raft logs are entity logs on disk,
// snapshots and hard state files included. A crash closes the storage
// and opens it again from its files. A power cut makes the log's writes
// fail from the Stage that asked, so nothing staged after it reaches the
// files, as nothing unsynced survives a real one; a log cut back in that
// Stage stays cut, as it would on a disk. The logs do not fsync (their
// durability is the simulation's to decide) and use small segments, so
// that members roll, cut and reset them often.
func OnDisk(dir string) func(id uint64) (Storage, error) {
	return func(id uint64) (Storage, error) {
		d := &diskStorage{dir: filepath.Join(dir, fmt.Sprintf("member-%d", id))}
		return d, d.open()
	}
}

type diskStorage struct {
	*replica.LogStorage
	dir string
	cut func() bool
	// out is the power of this opening of the storage: once it is out,
	// the log's writes fail.
	out *atomic.Bool
}

func (d *diskStorage) open() error {
	out := &atomic.Bool{}
	opts := log.Options{Sync: log.SyncNone, SegmentSize: 4096, IdleRollBytes: 1024,
		Fault: func(op string) error {
			if out.Load() {
				return ErrPowerCut
			}
			return nil
		}}
	s, err := replica.OpenLogStorage(d.dir, opts)
	if err != nil {
		return err
	}
	d.LogStorage, d.out = s, out
	return nil
}

func (d *diskStorage) Stage(hs *pb.HardState, entries []*pb.Entry) error {
	if d.cut != nil && d.cut() {
		d.out.Store(true)
	}
	err := d.LogStorage.Stage(hs, entries)
	if err != nil && d.out.Load() {
		return ErrPowerCut // the log failed at the cut
	}
	return err
}

func (d *diskStorage) Sync() error {
	if d.out.Load() {
		return ErrPowerCut
	}
	return d.LogStorage.Sync()
}

func (d *diskStorage) PowerCut(cut func() bool) { d.cut = cut }

func (d *diskStorage) Compact(index uint64, cs *pb.ConfState, data []byte) error {
	if err := d.CreateSnapshot(index, cs, data); err != nil && !errors.Is(err, raft.ErrSnapOutOfDate) {
		return err
	}
	return nil
}

func (d *diskStorage) AfterCrash() (Storage, error) {
	d.LogStorage.Close() // a log whose power went out answers its failure
	n := &diskStorage{dir: d.dir}
	return n, n.open()
}

func (d *diskStorage) Close() error {
	err := d.LogStorage.Close()
	if d.out.Load() || errors.Is(err, log.ErrClosed) {
		return nil
	}
	return err
}

package replica

import (
	"errors"
	"math"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// simStorage is a Storage in memory that knows what a power cut keeps:
// reads see everything staged, a crash keeps only what was synced.
type simStorage struct {
	*raft.MemoryStorage                                   // what is staged
	durable             *raft.MemoryStorage               // what survives a crash
	pending             []func(*raft.MemoryStorage) error // staged since the last sync
	// cut, if set, is asked at each sync whether the power goes out
	// before it: then nothing staged since the last one survives.
	cut func() bool
}

var errPowerCut = errors.New("power cut before the sync")

func newSimStorage() *simStorage {
	return &simStorage{MemoryStorage: raft.NewMemoryStorage(), durable: raft.NewMemoryStorage()}
}

func (s *simStorage) stage(op func(*raft.MemoryStorage) error) error {
	s.pending = append(s.pending, op)
	return op(s.MemoryStorage)
}

func (s *simStorage) Stage(hs *pb.HardState, entries []*pb.Entry) error {
	if hs != nil {
		hs = proto.Clone(hs).(*pb.HardState)
	}
	return s.stage(func(ms *raft.MemoryStorage) error {
		if err := ms.Append(entries); err != nil {
			return err
		}
		if hs != nil {
			return ms.SetHardState(hs)
		}
		return nil
	})
}

func (s *simStorage) StageSnapshot(snap *pb.Snapshot) error {
	return s.stage(func(ms *raft.MemoryStorage) error { return ms.ApplySnapshot(snap) })
}

func (s *simStorage) Sync() error {
	if s.cut != nil && s.cut() {
		return errPowerCut
	}
	for _, op := range s.pending {
		if err := op(s.durable); err != nil {
			return err
		}
	}
	s.pending = nil
	return nil
}

// compact snapshots the staged log at index with data and drops the
// entries before it, on both sides: a snapshot is written durably at once
// (the real one renames an fsynced file).
func (s *simStorage) compact(index uint64, cs *pb.ConfState, data []byte) error {
	for _, ms := range []*raft.MemoryStorage{s.MemoryStorage, s.durable} {
		last, _ := ms.LastIndex()
		if index > last {
			continue // the durable side lags: it keeps its log
		}
		if _, err := ms.CreateSnapshot(index, cs, data); err != nil && !errors.Is(err, raft.ErrSnapOutOfDate) {
			return err
		}
		if err := ms.Compact(index); err != nil && !errors.Is(err, raft.ErrCompacted) {
			return err
		}
	}
	return nil
}

// afterCrash is the storage a member finds when it starts again after a
// crash: what was durable.
func (s *simStorage) afterCrash() *simStorage {
	n := newSimStorage()
	snap, _ := s.durable.Snapshot()
	hs, _, _ := s.durable.InitialState()
	first, _ := s.durable.FirstIndex()
	last, _ := s.durable.LastIndex()
	var ents []*pb.Entry
	if last >= first {
		ents, _ = s.durable.Entries(first, last+1, math.MaxUint64)
	}
	for _, ms := range []*raft.MemoryStorage{n.MemoryStorage, n.durable} {
		if !raft.IsEmptySnap(snap) {
			ms.ApplySnapshot(snap)
		}
		ms.Append(ents)
		ms.SetHardState(hs)
	}
	return n
}

package simulation

import (
	"errors"
	"math"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/walbus/walbus/broker/replica"
)

// Storage is a member's storage under the simulation: what a Group
// persists to, plus what the simulation needs to compact it, to crash it
// and to cut its power.
type Storage interface {
	replica.Storage
	// Compact takes a snapshot of the log at index, with the state
	// machine's data and the membership cs, and drops the entries before
	// it. The snapshot is durable at once (a real one renames an fsynced
	// file); the entries after it are as durable as they were.
	Compact(index uint64, cs *pb.ConfState, data []byte) error
	// AfterCrash is what the member finds when it starts again after a
	// crash: what was durable. The simulation uses this one no more.
	AfterCrash() (Storage, error)
	// PowerCut sets what every Sync asks first. If it says yes, the power
	// goes out before the sync: nothing staged since the last one
	// survives the crash that follows, and Sync returns ErrPowerCut.
	PowerCut(cut func() bool)
	// Close lets go of what the storage holds, at the end of a run.
	Close() error
}

// ErrPowerCut is what a Sync returns when the power went out before it.
var ErrPowerCut = errors.New("power cut before the sync")

// MemoryStorage is the default Storage: raft's MemoryStorage twice, one
// for what is staged (which reads see) and one for what is durable (what
// a crash keeps).
type MemoryStorage struct {
	*raft.MemoryStorage                                   // what is staged
	durable             *raft.MemoryStorage               // what survives a crash
	pending             []func(*raft.MemoryStorage) error // staged since the last sync
	cut                 func() bool
}

// NewMemoryStorage is an empty MemoryStorage.
func NewMemoryStorage() *MemoryStorage {
	return &MemoryStorage{MemoryStorage: raft.NewMemoryStorage(), durable: raft.NewMemoryStorage()}
}

// stage does op on the staged side now, and on the durable side at the
// next Sync.
func (s *MemoryStorage) stage(op func(*raft.MemoryStorage) error) error {
	s.pending = append(s.pending, op)
	return op(s.MemoryStorage)
}

func (s *MemoryStorage) Stage(hs *pb.HardState, entries []*pb.Entry) error {
	if hs != nil {
		hs = proto.Clone(hs).(*pb.HardState) // Raft reuses its own
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

func (s *MemoryStorage) StageSnapshot(snap *pb.Snapshot) error {
	return s.stage(func(ms *raft.MemoryStorage) error { return ms.ApplySnapshot(snap) })
}

func (s *MemoryStorage) Sync() error {
	if s.cut != nil && s.cut() {
		return ErrPowerCut
	}
	for _, op := range s.pending {
		if err := op(s.durable); err != nil {
			return err
		}
	}
	s.pending = nil
	return nil
}

func (s *MemoryStorage) PowerCut(cut func() bool) { s.cut = cut }

func (s *MemoryStorage) Close() error { return nil }

func (s *MemoryStorage) Compact(index uint64, cs *pb.ConfState, data []byte) error {
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

func (s *MemoryStorage) AfterCrash() (Storage, error) {
	n := NewMemoryStorage()
	snap, err := s.durable.Snapshot()
	if err != nil {
		return nil, err
	}
	hs, _, err := s.durable.InitialState()
	if err != nil {
		return nil, err
	}
	first, _ := s.durable.FirstIndex()
	last, _ := s.durable.LastIndex()
	var ents []*pb.Entry
	if last >= first {
		if ents, err = s.durable.Entries(first, last+1, math.MaxUint64); err != nil {
			return nil, err
		}
	}
	for _, ms := range []*raft.MemoryStorage{n.MemoryStorage, n.durable} {
		if !raft.IsEmptySnap(snap) {
			if err := ms.ApplySnapshot(snap); err != nil {
				return nil, err
			}
		}
		if err := ms.Append(ents); err != nil {
			return nil, err
		}
		if err := ms.SetHardState(hs); err != nil {
			return nil, err
		}
	}
	return n, nil
}

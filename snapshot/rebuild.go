package snapshot

import (
	"fmt"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// Source is a log to rebuild from: a live *log.Log or an offline
// *log.ReadOnly.
type Source interface {
	FirstIndex() uint64
	LastIndex() uint64
	ScanFrom(from uint64, fn func(*event.Event) error) error
}

// Rebuilt reports how a state was rebuilt.
type Rebuilt struct {
	Snapshot uint64 // index of the snapshot loaded, 0 if none
	Skipped  []Skipped
	Replayed int // events replayed after it
	// SetAside are the snapshots Recover renamed because they are beyond
	// the log's end, newest first.
	SetAside []Info
}

// Rebuild returns an entity's state at the end of its log: the newest
// snapshot in dir that fits the log, then every event after it.
func Rebuild(dir string, src Source) (*projection.Entity, Rebuilt, error) {
	infos, err := List(dir)
	if err != nil {
		return nil, Rebuilt{}, err
	}
	return rebuild(infos, src)
}

// Recover is Rebuild for a log that goes on from here: snapshots beyond its
// end (the log was cut by a repair, or lost what was never durable) are
// set aside first (SetAsideBeyond), since the log will grow past them and
// they would then seem to fit. It reads dir once.
func Recover(dir string, src Source) (*projection.Entity, Rebuilt, error) {
	infos, err := List(dir)
	if err != nil {
		return nil, Rebuilt{}, err
	}
	moved, infos, err := setAsideBeyond(dir, infos, src.LastIndex())
	if err != nil {
		return nil, Rebuilt{SetAside: moved}, err
	}
	st, rep, err := rebuild(infos, src)
	rep.SetAside = moved
	return st, rep, err
}

func rebuild(infos []Info, src Source) (*projection.Entity, Rebuilt, error) {
	var rep Rebuilt
	first, last := src.FirstIndex(), src.LastIndex()
	st, info, skipped := load(infos, func(index uint64) error {
		if index+1 < first || index > last {
			return fmt.Errorf("snapshot at %d does not fit the log (%d-%d)", index, first, last)
		}
		return nil
	})
	rep.Skipped = skipped
	from := uint64(1)
	if st != nil {
		rep.Snapshot, from = info.Index, info.Index+1
	} else {
		st = projection.New()
		if first > 1 {
			return nil, rep, fmt.Errorf("the log starts at %d and no snapshot covers the events before it", first)
		}
	}
	err := src.ScanFrom(from, func(ev *event.Event) error {
		rep.Replayed++
		return st.Apply(ev)
	})
	if err != nil {
		return nil, rep, fmt.Errorf("replay: %w", err)
	}
	return st, rep, nil
}

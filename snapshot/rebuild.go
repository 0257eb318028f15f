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
}

// Rebuild returns an entity's state at the end of its log: the newest
// snapshot in dir that fits the log, then every event after it.
func Rebuild(dir string, src Source) (*projection.Entity, Rebuilt, error) {
	var rep Rebuilt
	first, last := src.FirstIndex(), src.LastIndex()
	st, info, skipped, err := Load(dir, func(index uint64) error {
		if index+1 < first || index > last {
			return fmt.Errorf("snapshot at %d does not fit the log (%d-%d)", index, first, last)
		}
		return nil
	})
	rep.Skipped = skipped
	if err != nil {
		return nil, rep, err
	}
	from := uint64(1)
	if st != nil {
		rep.Snapshot, from = info.Index, info.Index+1
	} else {
		st = projection.New()
		if first > 1 {
			return nil, rep, fmt.Errorf("the log starts at %d and no snapshot covers the events before it", first)
		}
	}
	err = src.ScanFrom(from, func(ev *event.Event) error {
		rep.Replayed++
		return st.Apply(ev)
	})
	if err != nil {
		return nil, rep, fmt.Errorf("replay: %w", err)
	}
	return st, rep, nil
}

package tools

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
)

// readLog calls fn for every record of ro with from <= index <= to (to 0: to
// the end), in order, while the log reads back: it stops at the first
// damaged record or missing index and returns where that was. An error fn
// returns stops the walk and is returned as it is. seg is the file name of
// the record's segment. The event's byte slices are valid during the call.
// The damage names no directory: the caller names the log.
func readLog(ro *log.ReadOnly, from, to uint64, fn func(ev *event.Event, seg string) error) (*log.Damage, error) {
	segs := ro.Segments()
	var want uint64 // the next index; 0 before the first segment read
	for i, s := range segs {
		if i+1 < len(segs) && segs[i+1].First <= from {
			continue // wholly before from
		}
		if to != 0 && s.First > to {
			return nil, nil
		}
		name := filepath.Base(s.Path)
		if want != 0 && s.First != want {
			if s.First > want {
				return &log.Damage{Segment: want, Index: want, Offset: -1,
					Reason: fmt.Sprintf("records %d-%d are in no segment file", want, s.First-1)}, nil
			}
			return &log.Damage{Segment: s.First, Index: s.First, Offset: -1,
				Reason: fmt.Sprintf("segment starts at index %d but the one before holds records up to %d", s.First, want-1)}, nil
		}
		next := s.First
		var fnErr error
		prob, err := ro.WalkSegment(s.First, func(r log.RecordInfo) error {
			next = r.Event.Index + 1
			if r.Event.Index < from {
				return nil
			}
			if to != 0 && r.Event.Index > to {
				fnErr = errStop
				return errStop
			}
			if err := fn(&r.Event, name); err != nil {
				fnErr = err
				return err
			}
			return nil
		})
		if fnErr != nil {
			if errors.Is(fnErr, errStop) {
				return nil, nil
			}
			return nil, fnErr
		}
		if err != nil {
			return &log.Damage{Segment: s.First, Index: next, Offset: -1, Reason: err.Error()}, nil
		}
		if prob != nil {
			return prob, nil
		}
		want = next
	}
	return nil, nil
}

// errStop ends a walk early without an error.
var errStop = errors.New("stop")

// firstIndex is the first index of a log by its first segment's name, 0
// for a log without segments.
func firstIndex(ro *log.ReadOnly) uint64 {
	segs := ro.Segments()
	if len(segs) == 0 {
		return 0
	}
	return segs[0].First
}

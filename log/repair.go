package log

import (
	"fmt"
	"os"

	"github.com/walbus/walbus/log/event"
)

// TailRepair says what Open removed from the end of a log.
type TailRepair struct {
	// FromIndex is the first index removed; every index at or after it is gone.
	FromIndex uint64
	// Records counts whole records removed because their atomic group never
	// completed; Torn reports a partial or damaged last entry.
	Records int
	Torn    bool
	Bytes   int64
	Reason  string
}

func (r TailRepair) String() string {
	if r.Bytes == 0 {
		return "clean"
	}
	return fmt.Sprintf("dropped %d bytes from index %d (%d whole records of an unfinished group, torn entry: %v): %s",
		r.Bytes, r.FromIndex, r.Records, r.Torn, r.Reason)
}

// repairTail makes the end of the log in dir well formed before tidwall opens
// it. A crash can leave the last segment with a partial entry, zeros where a
// write was allocated but not done, or a damaged last record; and a batch
// (an atomic group) that was cut short, possibly across a segment boundary.
// All of that was never acknowledged under SyncAlways, and is cut away.
//
// Damage followed by valid records is not a torn write: it is corruption, and
// repairTail returns a *Damage unless force is set, in which case it
// cuts there too.
//
// When it repairs nothing, tail says what the last segment holds.
func repairTail(dir string, segs []uint64, force bool) (rep TailRepair, kept []uint64, tail tailInfo, err error) {
	if len(segs) == 0 {
		return rep, segs, tail, nil
	}
	last := len(segs) - 1
	data, err := os.ReadFile(segmentPath(dir, segs[last]))
	if err != nil {
		return rep, segs, tail, err
	}
	recs, bad := scanRecords(data, segs[last])
	cut := len(data)
	if bad != nil {
		if bad.Followed && !force {
			bad.Dir = dir
			bad.Reason += " (valid records follow it)"
			return rep, segs, tail, bad
		}
		cut = int(bad.Offset)
		rep.FromIndex = bad.Index
		rep.Torn = true
		rep.Reason = bad.Reason
	}
	rep.Bytes += int64(len(data) - cut)

	// Drop a trailing group whose last record carries FlagContinued. The group
	// may have started in an earlier segment when tidwall cycled mid-batch.
	i := last
	for {
		n := len(recs)
		dangling := n > 0 && recs[n-1].flags&event.FlagContinued != 0 || n == 0 && prevContinues(dir, segs, i)
		if !dangling {
			break
		}
		rep.Reason = "unfinished atomic group"
		k := n
		for k > 0 && recs[k-1].flags&event.FlagContinued != 0 {
			k--
		}
		if k > 0 || i == 0 || !prevContinues(dir, segs, i) {
			// The group starts at recs[k], inside this segment.
			rep.Bytes += int64(recs[n-1].end - recs[k].off)
			rep.Records += n - k
			rep.FromIndex = recs[k].index
			cut = recs[k].off
			break
		}
		// All of segment i belongs to a group that began in segment i-1.
		if n > 0 {
			rep.Bytes += int64(recs[n-1].end)
			rep.Records += n
			rep.FromIndex = recs[0].index
		}
		if err := os.Remove(segmentPath(dir, segs[i])); err != nil {
			return rep, segs, tail, err
		}
		segs = segs[:i]
		i--
		prev, err := os.ReadFile(segmentPath(dir, segs[i]))
		if err != nil {
			return rep, segs, tail, err
		}
		var pbad *Damage
		recs, pbad = scanRecords(prev, segs[i])
		if pbad != nil {
			pbad.Dir = dir
			return rep, segs, tail, pbad
		}
		cut = len(prev)
	}
	if rep.Bytes == 0 && i == last {
		return rep, segs, tailInfo{known: true, records: len(recs), size: int64(len(data))}, nil
	}
	path := segmentPath(dir, segs[i])
	if err := truncateFile(path, int64(cut)); err != nil {
		return rep, segs, tail, err
	}
	if cut == 0 && i > 0 {
		// An empty segment after a cut earlier segment would claim indexes
		// the log no longer has.
		if err := os.Remove(path); err != nil {
			return rep, segs, tail, err
		}
		segs = segs[:i]
	}
	return rep, segs, tail, SyncDir(dir)
}

// tailInfo is what a log's last segment holds, if known: its records and
// bytes.
type tailInfo struct {
	known   bool
	records int
	size    int64
}

// prevContinues reports whether the last record of the segment before segs[i]
// has FlagContinued set.
func prevContinues(dir string, segs []uint64, i int) bool {
	if i == 0 {
		return false
	}
	data, err := os.ReadFile(segmentPath(dir, segs[i-1]))
	if err != nil {
		return false
	}
	recs, _ := scanRecords(data, segs[i-1])
	return len(recs) > 0 && recs[len(recs)-1].flags&event.FlagContinued != 0
}

func truncateFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func segmentPath(dir string, first uint64) string {
	return dir + string(os.PathSeparator) + SegmentName(first)
}

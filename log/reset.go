package log

import (
	"fmt"
	"os"
	"path/filepath"
)

// Reset empties the log in dir (creating dir if needed) so that, opened
// again, it holds nothing and gives its next record index next. A replica
// that takes its group's snapshot does this: the records it had are
// replaced by the snapshot, and the group's log goes on after it
// (docs/cluster.md, "Snapshots and truncation"). The log must not be
// open. Segments go newest first, so a crash part way leaves a log cut at
// the back (or none, which opens empty from index 1), never one with a
// hole; the caller tells it from a finished reset by its last index and
// resets again.
func Reset(dir string, next uint64) error {
	if next == 0 {
		return fmt.Errorf("reset log %s: index 0", dir)
	}
	if err := MkdirAllDurable(dir, 0o750); err != nil {
		return err
	}
	segs, _, err := readSegments(dir)
	if err != nil {
		return err
	}
	// tidwall's leftovers of a truncation cut short go first: they would
	// make Open finish that truncation on what is left.
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, ent := range ents {
		if n := ent.Name(); !ent.IsDir() && len(n) > segmentNameLen && isSegmentName(n[:segmentNameLen]) {
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				return fmt.Errorf("reset log %s: %w", dir, err)
			}
		}
	}
	for i := len(segs) - 1; i >= 0; i-- {
		if err := os.Remove(segmentPath(dir, segs[i])); err != nil {
			return fmt.Errorf("reset log %s: %w", dir, err)
		}
	}
	f, err := os.OpenFile(segmentPath(dir, next), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return fmt.Errorf("reset log %s: %w", dir, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("reset log %s: %w", dir, err)
	}
	return SyncDir(dir)
}

// isSegmentName reports whether name is a segment file's name.
func isSegmentName(name string) bool {
	if len(name) != segmentNameLen {
		return false
	}
	for _, c := range []byte(name) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

package tools

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/snapshot"
)

// DumpReport is the low-level view of a data directory's files.
type DumpReport struct {
	Logs          []LogDump `json:"logs"`
	Segments      int       `json:"segments"`
	SegmentBytes  int64     `json:"segment_bytes"`
	Records       int       `json:"records"`
	Snapshots     int       `json:"snapshots"`
	SnapshotBytes int64     `json:"snapshot_bytes"`
}

// LogDump is one log's segments and, for an entity, its snapshots.
type LogDump struct {
	Label         string         `json:"log"`
	Dir           string         `json:"dir"`
	Problem       string         `json:"problem,omitempty"`
	Segments      []SegmentDump  `json:"segments"`
	Snapshots     []SnapshotDump `json:"snapshots,omitempty"`
	SegmentBytes  int64          `json:"segment_bytes"`
	Records       int            `json:"records"`
	SnapshotBytes int64          `json:"snapshot_bytes"`
}

// SegmentDump is one segment file.
type SegmentDump struct {
	Name    string      `json:"name"`
	Size    int64       `json:"size"`
	First   uint64      `json:"first"` // first and last index of its valid records
	Last    uint64      `json:"last"`
	Records int         `json:"records"`
	Types   []TypeCount `json:"types"`
	Damage  string      `json:"damage,omitempty"` // where its valid records end, if before the file does
}

// TypeCount is how many records of one event type a segment holds.
type TypeCount struct {
	Type  string `json:"type"`
	Count int    `json:"count"`
}

// SnapshotDump is one snapshot file.
type SnapshotDump struct {
	Name    string  `json:"name"`
	Index   uint64  `json:"index"`
	Size    int64   `json:"size"`
	RawSize int     `json:"raw_size"`
	Ratio   float64 `json:"ratio"` // raw size / file size
	Problem string  `json:"problem,omitempty"`
}

// Dump describes the segments and snapshots of the data directory data:
// the namespace log and every entity, or only entity if it is not "".
func Dump(data, entity string) (*DumpReport, error) {
	cat, err := ReadCatalog(data)
	if err != nil {
		return nil, err
	}
	rep := &DumpReport{}
	if entity == "" {
		rep.add(dumpLog(NamespaceLabel, data, filepath.Join(data, namespaceDir), ""))
		for _, e := range cat.Entities {
			rep.add(dumpLog(e.Name, data, e.LogDir(), e.SnapshotDir()))
		}
	} else {
		e, err := cat.Find(entity)
		if err != nil {
			return nil, err
		}
		rep.add(dumpLog(e.Name, data, e.LogDir(), e.SnapshotDir()))
	}
	return rep, nil
}

func (r *DumpReport) add(l LogDump) {
	r.Logs = append(r.Logs, l)
	r.Segments += len(l.Segments)
	r.SegmentBytes += l.SegmentBytes
	r.Records += l.Records
	r.Snapshots += len(l.Snapshots)
	r.SnapshotBytes += l.SnapshotBytes
}

func dumpLog(label, data, dir, snapDir string) LogDump {
	ld := LogDump{Label: label, Dir: relPath(data, filepath.Dir(dir)), Segments: []SegmentDump{}}
	if snapDir == "" {
		ld.Dir = relPath(data, dir)
	}
	ro, err := log.OpenReadOnly(dir)
	if err != nil {
		ld.Problem = err.Error()
	} else {
		for _, s := range ro.Segments() {
			sd := SegmentDump{Name: filepath.Base(s.Path), Size: s.Size}
			counts := map[log.Type]int{}
			prob, err := ro.WalkSegment(s.First, func(rec log.RecordInfo) error {
				if sd.Records == 0 {
					sd.First = rec.Event.Index
				}
				sd.Last = rec.Event.Index
				sd.Records++
				counts[rec.Event.Type]++
				return nil
			})
			switch {
			case err != nil:
				sd.Damage = err.Error()
			case prob != nil:
				sd.Damage = prob.Error()
			}
			for _, t := range slices.Sorted(mapKeys(counts)) {
				sd.Types = append(sd.Types, TypeCount{t.String(), counts[t]})
			}
			ld.Segments = append(ld.Segments, sd)
			ld.SegmentBytes += sd.Size
			ld.Records += sd.Records
		}
		ro.Close()
	}
	if snapDir == "" {
		return ld
	}
	infos, err := snapshot.List(snapDir)
	if err != nil {
		ld.Problem = strings.TrimPrefix(ld.Problem+"; ", "; ") + "snapshots: " + err.Error()
	}
	for i := len(infos) - 1; i >= 0; i-- { // oldest first, like the segments
		info := infos[i]
		sd := SnapshotDump{Name: filepath.Base(info.Path), Index: info.Index, Size: info.Size}
		if raw, err := readSnapshot(info); err != nil {
			sd.Problem = err.Error()
		} else {
			sd.RawSize = len(raw)
			if info.Size > 0 {
				sd.Ratio = float64(len(raw)) / float64(info.Size)
			}
		}
		ld.Snapshots = append(ld.Snapshots, sd)
		ld.SnapshotBytes += sd.Size
	}
	return ld
}

// readSnapshot reads one snapshot file's raw state, surviving any damage.
func readSnapshot(info snapshot.Info) (raw []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			raw, err = nil, fmt.Errorf("reading panicked: %v", r)
		}
	}()
	raw, err = snapshot.Read(info)
	if err != nil {
		// snapshot.Read names the file; the report already does.
		err = fmt.Errorf("%s", strings.TrimPrefix(err.Error(), info.Path+": "))
	}
	return raw, err
}

// WriteText prints the report for people.
func (r *DumpReport) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, l := range r.Logs {
		fmt.Fprintf(&b, "%s (%s)\n", l.Label, l.Dir)
		if l.Problem != "" {
			fmt.Fprintf(&b, "  problem: %s\n", l.Problem)
		}
		if len(l.Segments) > 0 {
			tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  segment\tbytes\tfirst\tlast\trecords\ttypes")
			for _, s := range l.Segments {
				var types []string
				for _, tc := range s.Types {
					types = append(types, fmt.Sprintf("%s=%d", tc.Type, tc.Count))
				}
				first, last := fmt.Sprint(s.First), fmt.Sprint(s.Last)
				if s.Records == 0 {
					first, last = "-", "-"
				}
				fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%d\t%s\n", s.Name, s.Size, first, last, s.Records, strings.Join(types, " "))
			}
			tw.Flush()
			for _, s := range l.Segments {
				if s.Damage != "" {
					fmt.Fprintf(&b, "  %s: damaged: %s\n", s.Name, s.Damage)
				}
			}
		}
		if len(l.Snapshots) > 0 {
			tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  snapshot\tindex\tbytes\traw bytes\tratio")
			for _, s := range l.Snapshots {
				if s.Problem != "" {
					fmt.Fprintf(tw, "  %s\t%d\t%d\t-\t-\tunreadable: %s\n", s.Name, s.Index, s.Size, s.Problem)
					continue
				}
				fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%.1fx\n", s.Name, s.Index, s.Size, s.RawSize, s.Ratio)
			}
			tw.Flush()
		}
		fmt.Fprintf(&b, "  %s, %d bytes, %d records", plural(len(l.Segments), "segment"), l.SegmentBytes, l.Records)
		if len(l.Snapshots) > 0 {
			fmt.Fprintf(&b, "; %s, %d bytes", plural(len(l.Snapshots), "snapshot"), l.SnapshotBytes)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "total: %s, %s, %d bytes, %d records; %s, %d bytes\n", plural(len(r.Logs), "log"),
		plural(r.Segments, "segment"), r.SegmentBytes, r.Records, plural(r.Snapshots, "snapshot"), r.SnapshotBytes)
	_, err := io.WriteString(w, b.String())
	return err
}

// plural is "1 lock", "2 locks", "3 failed deliveries".
func plural(n int, what string) string {
	switch {
	case n == 1:
		return "1 " + what
	case strings.HasSuffix(what, "y"):
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(what, "y"))
	}
	return fmt.Sprintf("%d %ss", n, what)
}

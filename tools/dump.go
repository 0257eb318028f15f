package tools

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/snapshot"
	"github.com/walbus/walbus/tools/compaction"
)

// DumpReport is the low-level view of a data directory's files.
type DumpReport struct {
	Logs          []LogDump `json:"logs"`
	Segments      int       `json:"segments"`
	SegmentBytes  int64     `json:"segment_bytes"`
	Records       int       `json:"records"`
	Snapshots     int       `json:"snapshots"`
	SnapshotBytes int64     `json:"snapshot_bytes"`
	Archives      int       `json:"archives,omitempty"`
	ArchiveBytes  int64     `json:"archive_bytes,omitempty"`
	Retained      int       `json:"retained,omitempty"` // history files, with DumpOptions.Retained
	RetainedBytes int64     `json:"retained_bytes,omitempty"`
}

// LogDump is one log's segments and, for an entity, its snapshots and
// archives.
type LogDump struct {
	Label         string         `json:"log"`
	Dir           string         `json:"dir"`
	Problem       string         `json:"problem,omitempty"`
	Segments      []SegmentDump  `json:"segments"`
	Snapshots     []SnapshotDump `json:"snapshots,omitempty"`
	Archives      []ArchiveDump  `json:"archives,omitempty"`
	Retained      []ArchiveDump  `json:"retained,omitempty"`     // history `walbus compact --retain` kept
	RetainedDir   string         `json:"retained_dir,omitempty"` // in DumpOptions.Retained
	SegmentBytes  int64          `json:"segment_bytes"`
	Records       int            `json:"records"`
	SnapshotBytes int64          `json:"snapshot_bytes"`
	ArchiveBytes  int64          `json:"archive_bytes,omitempty"`
	RetainedBytes int64          `json:"retained_bytes,omitempty"`
}

// ArchiveDump is one archive file: records compaction moved out of the
// log, or history it retained.
type ArchiveDump struct {
	Name    string      `json:"name"`
	Size    int64       `json:"size"`
	First   uint64      `json:"first"` // lowest and highest index it holds
	Last    uint64      `json:"last"`
	Records int         `json:"records"`
	RawSize int64       `json:"raw_size"` // its records uncompressed
	Ratio   float64     `json:"ratio"`    // raw size / file size
	Types   []TypeCount `json:"types"`
	Problem string      `json:"problem,omitempty"` // it does not open, or records that do not read back
}

// DumpOptions select what Dump describes.
type DumpOptions struct {
	Entity string // one entity; "" for the namespace log and every entity
	// Retained is a directory `walbus compact --retain` wrote history to,
	// whose files are listed too.
	Retained string
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

// Dump describes the segments, snapshots and archives of the data
// directory data: the namespace log and every entity, or only
// opts.Entity.
func Dump(data string, opts DumpOptions) (*DumpReport, error) {
	cat, err := ReadCatalog(data)
	if err != nil {
		return nil, err
	}
	rep := &DumpReport{}
	entity := func(e EntityInfo) {
		ld := dumpLog(e.Name, data, e.LogDir(), e.SnapshotDir())
		ld.Archives, ld.ArchiveBytes = dumpArchives(layout.ArchiveDir(e.Dir), "*.wba")
		if opts.Retained != "" {
			dir := compaction.RetainedDir(opts.Retained, e.ID)
			if ld.Retained, ld.RetainedBytes = dumpArchives(dir, compaction.RetainedGlob); len(ld.Retained) > 0 {
				ld.RetainedDir = filepath.Base(dir)
			}
			if err := checkRetainedName(dir, e.Name); err != nil && !e.Orphan {
				ld.Problem = strings.TrimPrefix(ld.Problem+"; ", "; ") + err.Error()
			}
		}
		rep.add(ld)
	}
	if opts.Entity == "" {
		rep.add(dumpLog(NamespaceLabel, data, layout.NamespaceLog(data), ""))
		for _, e := range cat.Entities {
			entity(e)
		}
		if opts.Retained != "" {
			for _, ld := range retainedOnly(opts.Retained, cat) {
				rep.add(ld)
			}
		}
	} else {
		e, err := cat.Find(opts.Entity)
		if err != nil {
			return nil, err
		}
		entity(e)
	}
	return rep, nil
}

// retainedOnly describes the retained history in dir of entities the data
// directory no longer has (deleted since).
func retainedOnly(dir string, cat *Catalog) []LogDump {
	known := map[uint64]bool{}
	for _, e := range cat.Entities {
		known[e.ID] = true
	}
	ents, _ := os.ReadDir(dir)
	var out []LogDump
	for _, ent := range ents {
		id, ok := layout.ParseDirName(ent.Name())
		if !ok || !ent.IsDir() || known[id] {
			continue
		}
		name := fmt.Sprintf("$entity-%d", id)
		if b, err := os.ReadFile(filepath.Join(dir, ent.Name(), compaction.RetainedNameFile)); err == nil {
			name = strings.TrimSuffix(string(b), "\n")
		}
		ld := LogDump{Label: name, Dir: ent.Name(), Segments: []SegmentDump{}, RetainedDir: ent.Name(),
			Problem: "retained history of an entity the data directory does not have"}
		ld.Retained, ld.RetainedBytes = dumpArchives(filepath.Join(dir, ent.Name()), compaction.RetainedGlob)
		out = append(out, ld)
	}
	return out
}

// dumpArchives describes the archives in dir whose names match pattern, in
// name order, reading every record (as the segments are read) for the
// counts by type and the raw size.
func dumpArchives(dir, pattern string) ([]ArchiveDump, int64) {
	paths, _ := filepath.Glob(filepath.Join(dir, pattern))
	slices.Sort(paths)
	var out []ArchiveDump
	var total int64
	for _, p := range paths {
		ad := ArchiveDump{Name: filepath.Base(p)}
		if fi, err := os.Stat(p); err == nil {
			ad.Size = fi.Size()
		}
		total += ad.Size
		a, err := log.OpenArchive(p)
		if err != nil {
			ad.Problem = archiveReason(err)
			out = append(out, ad)
			continue
		}
		ad.First, ad.Last, ad.Records = a.First(), a.Last(), a.Len()
		counts := map[event.Type]int{}
		bad := 0
		var buf []byte
		for _, idx := range a.Indexes() {
			ev, err := a.Read(idx)
			if err != nil {
				if bad == 0 {
					ad.Problem = fmt.Sprintf("record %d does not read back: %s", idx, archiveReason(err))
				}
				bad++
				continue
			}
			counts[ev.Type]++
			buf = event.AppendRecord(buf[:0], &ev)
			ad.RawSize += int64(uvarintLen(len(buf)) + len(buf)) // as a block holds it
		}
		a.Close()
		if bad > 1 {
			ad.Problem += fmt.Sprintf(" (and %s after it)", plural(bad-1, "more record"))
		}
		if ad.Size > 0 {
			ad.Ratio = float64(ad.RawSize) / float64(ad.Size)
		}
		for _, t := range slices.Sorted(mapKeys(counts)) {
			ad.Types = append(ad.Types, TypeCount{t.String(), counts[t]})
		}
		out = append(out, ad)
	}
	return out, total
}

func uvarintLen(n int) int {
	return len(binary.AppendUvarint(nil, uint64(n)))
}

func (r *DumpReport) add(l LogDump) {
	r.Logs = append(r.Logs, l)
	r.Segments += len(l.Segments)
	r.SegmentBytes += l.SegmentBytes
	r.Records += l.Records
	r.Snapshots += len(l.Snapshots)
	r.SnapshotBytes += l.SnapshotBytes
	r.Archives += len(l.Archives)
	r.ArchiveBytes += l.ArchiveBytes
	r.Retained += len(l.Retained)
	r.RetainedBytes += l.RetainedBytes
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
			counts := map[event.Type]int{}
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
		writeArchives(&b, "archive", l.Archives)
		if len(l.Retained) > 0 {
			fmt.Fprintf(&b, "  retained history (%s in the --retained directory)\n", l.RetainedDir)
			writeArchives(&b, "history", l.Retained)
		}
		fmt.Fprintf(&b, "  %s, %d bytes, %d records", plural(len(l.Segments), "segment"), l.SegmentBytes, l.Records)
		if len(l.Snapshots) > 0 {
			fmt.Fprintf(&b, "; %s, %d bytes", plural(len(l.Snapshots), "snapshot"), l.SnapshotBytes)
		}
		if len(l.Archives) > 0 {
			fmt.Fprintf(&b, "; %s, %d bytes", plural(len(l.Archives), "archive"), l.ArchiveBytes)
		}
		if len(l.Retained) > 0 {
			fmt.Fprintf(&b, "; %s, %d bytes", plural(len(l.Retained), "retained history file"), l.RetainedBytes)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "total: %s, %s, %d bytes, %d records; %s, %d bytes", plural(len(r.Logs), "log"),
		plural(r.Segments, "segment"), r.SegmentBytes, r.Records, plural(r.Snapshots, "snapshot"), r.SnapshotBytes)
	if r.Archives > 0 {
		fmt.Fprintf(&b, "; %s, %d bytes", plural(r.Archives, "archive"), r.ArchiveBytes)
	}
	if r.Retained > 0 {
		fmt.Fprintf(&b, "; %s, %d bytes", plural(r.Retained, "retained history file"), r.RetainedBytes)
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeArchives prints a table of archive files under the heading what.
func writeArchives(b *strings.Builder, what string, archives []ArchiveDump) {
	if len(archives) == 0 {
		return
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  %s\tbytes\tfirst\tlast\trecords\traw bytes\tratio\ttypes\n", what)
	for _, a := range archives {
		if a.Records == 0 && a.Problem != "" {
			fmt.Fprintf(tw, "  %s\t%d\t-\t-\t-\t-\t-\tunreadable: %s\n", a.Name, a.Size, a.Problem)
			continue
		}
		var types []string
		for _, tc := range a.Types {
			types = append(types, fmt.Sprintf("%s=%d", tc.Type, tc.Count))
		}
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\t%.1fx\t%s\n", a.Name, a.Size, a.First, a.Last, a.Records, a.RawSize, a.Ratio, strings.Join(types, " "))
	}
	tw.Flush()
	for _, a := range archives {
		if a.Records > 0 && a.Problem != "" {
			fmt.Fprintf(b, "  %s: damaged: %s\n", a.Name, a.Problem)
		}
	}
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

package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/snapshot"
)

// Finding is one problem Verify found, located as entity/file/index: the
// entity name ($namespace for the namespace log), the segment or snapshot
// file, and the record index.
type Finding struct {
	Entity  string `json:"entity"`
	File    string `json:"file,omitempty"`  // segment or snapshot file name; "" when about no one file
	Index   uint64 `json:"index,omitempty"` // record or snapshot index; 0 when about no one record
	Problem string `json:"problem"`
}

func (f Finding) String() string {
	file, idx := f.File, "-"
	if file == "" {
		file = "-"
	}
	if f.Index != 0 {
		idx = strconv.FormatUint(f.Index, 10)
	}
	return fmt.Sprintf("%s/%s/%s: %s", f.Entity, file, idx, f.Problem)
}

// maxEventFindings bounds the findings about events (apply errors, broken
// invariants) per log: one bad event tends to make many more.
const maxEventFindings = 20

// Verify checks every log and snapshot of the data directory data: the
// envelope of every record in every segment, that segments continue one
// another, that events decode and apply to the projection, the projection's
// invariants as it goes, and that each snapshot equals the replay of the log
// up to its index. It also reports what the server would repair on start: a
// torn tail, an unfinished atomic group, entity directories the namespace
// does not list. It returns the findings (none for a clean directory), and
// an error only when data is not a data directory at all. It never changes
// a file.
func Verify(data string) ([]Finding, error) {
	fi, err := os.Stat(data)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", data)
	}
	_, nsErr := os.Stat(layout.NamespaceLog(data))
	ents, entErr := os.ReadDir(layout.EntitiesDir(data))
	if nsErr != nil && entErr != nil {
		return nil, fmt.Errorf("%s holds no walbus data (no namespace log, no entities)", data)
	}
	v := &verifier{data: data}
	live := v.namespace()
	dirs := map[uint64]string{}
	if entErr != nil && !errors.Is(entErr, os.ErrNotExist) {
		v.add(NamespaceLabel, "", 0, "entities directory unreadable: %v", entErr)
	}
	for _, ent := range ents {
		id, ok := layout.ParseDirName(ent.Name())
		if !ok {
			continue
		}
		dirs[id] = layout.EntityDir(data, id)
	}
	for id := range mapKeysSorted(live, dirs) {
		e, listed := live[id]
		switch {
		case !listed:
			v.add(fmt.Sprintf("$entity-%d", id), "", 0,
				"directory %s is not an entity of the namespace log: the server deletes it on start", relPath(data, dirs[id]))
		case dirs[id] == "":
			v.add(e.Name, "", 0, "directory %s is missing: the server starts the entity empty", relPath(data, e.Dir))
		default:
			v.entity(*e)
		}
	}
	return v.findings, nil
}

// mapKeysSorted yields the keys of both maps in ascending order, once each.
func mapKeysSorted(a map[uint64]*EntityInfo, b map[uint64]string) func(func(uint64) bool) {
	keys := map[uint64]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return slices.Values(slices.Sorted(mapKeys(keys)))
}

type verifier struct {
	data     string
	findings []Finding
}

// add records a finding, on one line whatever its parts hold.
func (v *verifier) add(entity, file string, index uint64, format string, args ...any) {
	problem := strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", " ")
	v.findings = append(v.findings, Finding{Entity: entity, File: file, Index: index, Problem: problem})
}

// guard turns a panic while checking label into a finding: whatever the
// damage, verify reports and goes on.
func (v *verifier) guard(label string) {
	if r := recover(); r != nil {
		v.add(label, "", 0, "verify failed unexpectedly (a walbus bug; please report): %v", r)
	}
}

// namespace checks the namespace log and returns its live entities by id.
func (v *verifier) namespace() map[uint64]*EntityInfo {
	live := map[uint64]*EntityInfo{}
	defer v.guard(NamespaceLabel)
	dir := layout.NamespaceLog(v.data)
	if _, err := os.Stat(dir); err != nil {
		v.add(NamespaceLabel, "", 0, "no namespace log: %v", err)
		return live
	}
	ro, err := log.OpenReadOnly(dir)
	if err != nil {
		v.add(NamespaceLabel, "", 0, "namespace log unreadable: %v", err)
		return live
	}
	defer ro.Close()
	if first := firstIndex(ro); first > 1 {
		v.add(NamespaceLabel, log.SegmentName(first), first, "the namespace log starts at index %d: its first records are gone", first)
	}
	lg := &logCheck{v: v, label: NamespaceLabel}
	lg.walk(ro, func(ev *event.Event, seg string) {
		if ev.Type == event.Marker {
			return // a Raft entry of a cluster node's metadata group
		}
		if !isNamespaceType(ev.Type) {
			lg.eventf(seg, ev.Index, "%s event in the namespace log", ev.Type)
			return
		}
		if ev.Type == event.ClockAdvanced {
			if ev.TTL <= 0 {
				lg.eventf(seg, ev.Index, "the test clock advanced by %v", time.Duration(ev.TTL))
			}
			return
		}
		if ev.Type == event.NodeAddress {
			if _, _, err := net.SplitHostPort(ev.Name); ev.Source == 0 || ev.Name != "" && err != nil {
				lg.eventf(seg, ev.Index, "node %d at %q: want a node id of 1 or more and host:port", ev.Source, ev.Name)
			}
			return
		}
		known := findLive(live, ev.Name)
		switch ev.Type {
		case event.EntityCreated, event.EntityUpdated:
			var spec entitySpec
			if err := json.Unmarshal(ev.Props, &spec); err != nil {
				lg.eventf(seg, ev.Index, "%s %q: definition does not decode: %v", ev.Type, ev.Name, err)
			} else if err := spec.Config.Validate(); err != nil {
				lg.eventf(seg, ev.Index, "%s %q: invalid config: %v", ev.Type, ev.Name, err)
			} else if spec.Kind != "queue" && spec.Kind != "topic" {
				lg.eventf(seg, ev.Index, "%s %q: unknown kind %q", ev.Type, ev.Name, spec.Kind)
			} else if (spec.Kind == "topic") != spec.Config.Topic {
				lg.eventf(seg, ev.Index, "%s %q: kind %q with a config that says topic=%v", ev.Type, ev.Name, spec.Kind, spec.Config.Topic)
			}
			if ev.Type == event.EntityCreated && known != nil {
				lg.eventf(seg, ev.Index, "entity %q created again (first at index %d) without being deleted", ev.Name, known.ID)
			}
		}
		if ev.Type != event.EntityCreated && known == nil {
			lg.eventf(seg, ev.Index, "%s of entity %q, which does not exist", ev.Type, ev.Name)
		}
		applyNamespace(live, v.data, ev)
	})
	lg.finish()
	return live
}

// logCheck checks the segments of one log.
type logCheck struct {
	v       *verifier
	label   string
	events  int // findings about events so far
	lastSeg string
	last    uint64 // last index visited
}

// eventf records a finding about one event, up to maxEventFindings.
func (lg *logCheck) eventf(seg string, index uint64, format string, args ...any) {
	lg.events++
	if lg.events <= maxEventFindings {
		lg.v.add(lg.label, seg, index, format, args...)
	}
}

func (lg *logCheck) finish() {
	if more := lg.events - maxEventFindings; more > 0 {
		lg.v.add(lg.label, "", 0, "%d more findings about events not shown", more)
	}
}

// walk checks every segment of ro: each record's envelope (WalkSegment),
// that each segment starts where the one before ended, and how the log
// ends. visit sees the records of the readable prefix of the log, in order.
func (lg *logCheck) walk(ro *log.ReadOnly, visit func(ev *event.Event, seg string)) {
	segs := ro.Segments()
	readable := true // every record so far was visited, in order
	var want uint64  // the index the next segment should start at, when known
	var groupStart uint64
	var groupSeg string
	brokenBeforeTail := false
	for i, s := range segs {
		name := filepath.Base(s.Path)
		last := i == len(segs)-1
		if want != 0 && s.First != want {
			readable, brokenBeforeTail = false, true
			if s.First > want {
				lg.v.add(lg.label, log.SegmentName(want), want, "records %d-%d are missing: no segment file holds them (a deleted segment?)", want, s.First-1)
			} else {
				lg.v.add(lg.label, name, s.First, "segment starts at index %d, but the segment before it holds records up to %d (a duplicated or renamed file?)", s.First, want-1)
			}
		}
		count := 0
		next := s.First
		prob, err := ro.WalkSegment(s.First, func(rec log.RecordInfo) error {
			count++
			next = rec.Event.Index + 1
			if rec.Event.Flags&event.FlagContinued != 0 {
				if groupStart == 0 {
					groupStart, groupSeg = rec.Event.Index, name
				}
			} else {
				groupStart = 0
			}
			if readable {
				lg.lastSeg, lg.last = name, rec.Event.Index
				visit(&rec.Event, name)
			}
			return nil
		})
		want = 0
		switch {
		case err != nil:
			lg.v.add(lg.label, name, s.First, "segment unreadable: %v", err)
		case prob != nil:
			lg.v.add(lg.label, name, prob.Index, "%s", describeProblem(prob, count, last))
		default:
			want = next
		}
		if err != nil || prob != nil {
			if !last || prob == nil || prob.Followed {
				brokenBeforeTail = true
			}
			readable = false
			groupStart = 0
		}
	}
	if groupStart != 0 && !brokenBeforeTail {
		lg.v.add(lg.label, groupSeg, groupStart, "unfinished atomic group from index %d: its last record never reached the disk (the server drops it on open)", groupStart)
	}
}

// describeProblem says what the first damage of a segment means.
func describeProblem(p *log.Damage, valid int, last bool) string {
	what := fmt.Sprintf("offset %d: %s", p.Offset, p.Reason)
	if valid == 0 && p.Offset == 0 && strings.HasPrefix(p.Reason, "record holds index") {
		what += fmt.Sprintf(", but the file name says the segment starts at %d (a renamed or copied file?)", p.Index)
	}
	switch {
	case last && !p.Followed:
		return "torn tail at " + what + " (the server cuts the log here on open)"
	case last:
		return "corrupt record at " + what + "; valid records follow it (the server refuses to open the log)"
	case p.Followed:
		return "corrupt record at " + what + "; valid records follow it"
	}
	return "corrupt record at " + what + ", in a segment that is not the last"
}

// snapCheck is one snapshot file and what reading it gave.
type snapCheck struct {
	info snapshot.Info
	name string
	raw  []byte // nil when unreadable
	done bool   // compared with the replay, or used as its base
}

// entity checks one entity's log and snapshots.
func (v *verifier) entity(e EntityInfo) {
	defer v.guard(e.Name)
	ro, err := log.OpenReadOnly(e.LogDir())
	if err != nil {
		v.add(e.Name, "", 0, "log unreadable: %v", err)
		return
	}
	defer ro.Close()
	snaps := v.snapshots(e.Name, e.SnapshotDir())
	bySeq := map[uint64]*snapCheck{}
	for _, s := range snaps {
		if s.raw != nil {
			bySeq[s.info.Index] = s
		}
	}
	lg := &logCheck{v: v, label: e.Name}
	first := firstIndex(ro)
	archives, unopened := v.archives(e.Name, layout.ArchiveDir(e.Dir), ro, first)
	defer func() {
		for _, a := range archives {
			a.Close()
		}
	}()
	newCheck := func(st *projection.Entity) *entityCheck {
		return &entityCheck{lg: lg, st: st, name: e.Name, ro: ro, first: first, archives: archives, unopened: unopened}
	}
	var c *entityCheck
	switch {
	case first == 0:
		if len(snaps) > 0 {
			v.add(e.Name, "", 0, "the log has no segments, but there are snapshots up to index %d", snaps[0].info.Index)
		}
		return
	case first == 1:
		c = newCheck(projection.New())
	default:
		// The oldest snapshot the log continues is the base of the replay.
		for i := len(snaps) - 1; i >= 0 && c == nil; i-- {
			s := snaps[i]
			if s.raw == nil || s.info.Index+1 < first {
				continue
			}
			if st, err := decodeState(s.raw); err == nil {
				c = newCheck(st)
				s.done = true
			}
		}
		if c == nil {
			v.add(e.Name, log.SegmentName(first), first, "the log starts at index %d and no readable snapshot covers the events before it", first)
		}
	}
	compare := func() {
		s := bySeq[c.st.LastIndex()]
		if s == nil || s.done {
			return
		}
		s.done = true
		got := c.st.Encode(nil)
		if !bytes.Equal(got, s.raw) {
			at := 0
			for at < len(got) && at < len(s.raw) && got[at] == s.raw[at] {
				at++
			}
			v.add(e.Name, s.name, s.info.Index, "snapshot differs from the replay of the log up to index %d (%d bytes against %d, first difference at byte %d)",
				s.info.Index, len(s.raw), len(got), at)
		}
	}
	if c != nil {
		compare()
	}
	lg.walk(ro, func(ev *event.Event, seg string) {
		if c == nil || ev.Index <= c.st.LastIndex() {
			return
		}
		c.apply(ev, seg)
		compare()
	})
	if c != nil && lg.last != 0 {
		c.full(lg.lastSeg)
	}
	lg.finish()
	for _, s := range snaps {
		if s.raw == nil || s.done {
			continue
		}
		// Older snapshots than the replay's base cannot be compared, nor
		// any when the replay had no base.
		if c != nil && s.info.Index > c.st.LastIndex() {
			v.add(e.Name, s.name, s.info.Index, "snapshot is past the last record the replay of the log reached (%d)", c.st.LastIndex())
		}
	}
}

// snapshots reads every snapshot of an entity, newest first, reporting those
// that do not read back or decode.
func (v *verifier) snapshots(label, dir string) []*snapCheck {
	infos, err := snapshot.List(dir)
	if err != nil {
		v.add(label, layout.Snapshots, 0, "snapshot directory unreadable: %v", err)
		return nil
	}
	var out []*snapCheck
	for _, info := range infos {
		s := &snapCheck{info: info, name: filepath.Base(info.Path)}
		out = append(out, s)
		raw, err := readSnapshot(info)
		if err != nil {
			v.add(label, s.name, info.Index, "snapshot unreadable: %v (the server skips it)", err)
			continue
		}
		st, err := decodeState(raw)
		switch {
		case err != nil:
			v.add(label, s.name, info.Index, "snapshot state does not decode: %v (the server skips it)", err)
		case st.LastIndex() != info.Index:
			v.add(label, s.name, info.Index, "snapshot holds the state at index %d, not %d (the server skips it)", st.LastIndex(), info.Index)
		default:
			s.raw = raw
		}
	}
	return out
}

// decodeState is projection.Decode, surviving a panic.
func decodeState(raw []byte) (st *projection.Entity, err error) {
	defer func() {
		if r := recover(); r != nil {
			st, err = nil, fmt.Errorf("decoding panicked: %v", r)
		}
	}()
	return projection.Decode(raw)
}

// entityCheck replays an entity log into the projection, checking each
// event and the invariants it must keep.
type entityCheck struct {
	lg       *logCheck
	st       *projection.Entity
	name     string // as the namespace log records it
	lastTime int64
	ro       *log.ReadOnly
	first    uint64         // the log's first index
	archives []*log.Archive // the entity's that open, newest first
	unopened bool           // some archive does not open
	begun    bool           // an event other than a marker was seen
	leading  uint64         // markers before it (a cluster member's log)
}

// msgState is what the projection says about one message.
type msgState struct {
	found      bool
	queue      uint32
	meta       index.Meta
	lock       index.Lock
	locked     bool // has a lock record
	deliveries int
}

func (c *entityCheck) lookup(seq uint64, queues ...uint32) msgState {
	for _, no := range queues {
		q := c.st.Queue(no)
		if q == nil {
			continue
		}
		if m, ok := q.Message(seq); ok {
			lk, locked := q.Lock(seq)
			return msgState{found: true, queue: no, meta: m, lock: lk, locked: locked, deliveries: int(m.Deliveries)}
		}
	}
	return msgState{}
}

func (c *entityCheck) apply(ev *event.Event, seg string) {
	if ev.Type == event.Marker {
		// A cluster member's Raft entry without events: it takes an
		// index and carries no time of the entity's (docs/cluster.md).
		if err := safeApply(c.st, ev); err != nil {
			c.lg.eventf(seg, ev.Index, "%s does not apply: %v", ev.Type, err)
		}
		if !c.begun {
			c.leading++
		}
		return
	}
	begins := !c.begun
	c.begun = true
	switch {
	case begins && ev.Index == 1+c.leading && ev.Type != event.EntityCreated:
		c.lg.eventf(seg, ev.Index, "the log begins with %s, not entity-created", ev.Type)
	case ev.Index != 1+c.leading && ev.Type == event.EntityCreated:
		c.lg.eventf(seg, ev.Index, "entity-created in the middle of the log")
	case ev.Type == event.EntityCreated && ev.Name != c.name:
		c.lg.eventf(seg, ev.Index, "the log names the entity %q, the namespace log %q", ev.Name, c.name)
	}
	if c.lastTime != 0 && ev.Time < c.lastTime {
		c.lg.eventf(seg, ev.Index, "time goes back %s from the record before", time.Duration(c.lastTime-ev.Time))
	}
	c.lastTime = ev.Time
	seq := seqOf(ev)
	group := event.GroupOf(ev.Queue)
	before := c.lookup(seq, group[:]...)
	if err := safeApply(c.st, ev); err != nil {
		c.lg.eventf(seg, ev.Index, "%s does not apply: %v", ev.Type, err)
		return
	}
	if seq == 0 {
		return
	}
	after := c.lookup(seq, group[:]...)
	switch {
	case !after.found:
	case (after.meta.State == index.Locked) != after.locked:
		c.lg.eventf(seg, ev.Index, "after %s, message %d is %s but has a lock record: %v", ev.Type, seq, after.meta.State, after.locked)
	case after.locked && index.TokenSeq(after.lock.Token) != seq:
		c.lg.eventf(seg, ev.Index, "message %d is locked with a token made for message %d", seq, index.TokenSeq(after.lock.Token))
	case before.found && ev.Type != event.Activated && after.deliveries < before.deliveries:
		c.lg.eventf(seg, ev.Index, "%s took the delivery count of message %d from %d down to %d", ev.Type, seq, before.deliveries, after.deliveries)
	}
	for _, no := range group {
		if q := c.st.Queue(no); q != nil {
			n := q.Counts()
			if sum := n.Available + n.Locked + n.Deferred + n.Scheduled; sum != n.Total {
				c.lg.eventf(seg, ev.Index, "after %s, queue %s holds %d messages but its state sets hold %d: a message is in two sets or in none",
					ev.Type, QueueName(no), n.Total, sum)
			}
		}
	}
}

// full checks the whole state: every message in exactly one set, locks on
// exactly the locked messages, overlays and sessions that refer to what
// exists, and that the state survives its own encoding.
func (c *entityCheck) full(seg string) {
	at := c.st.LastIndex()
	for _, no := range c.st.QueueNumbers() {
		q := c.st.Queue(no)
		if q == nil {
			continue
		}
		qn := QueueName(no)
		var byState [index.Scheduled + 1]uint64
		perSession := map[uint32]int{}
		for _, seq := range q.Peek(0, math.MaxInt, math.MaxUint64) {
			m, ok := q.Message(seq)
			if !ok {
				c.lg.eventf(seg, at, "queue %s: message %d is in the queue but has no metadata", qn, seq)
				continue
			}
			if m.State >= index.Available && m.State <= index.Scheduled {
				byState[m.State]++
			}
			if _, locked := q.Lock(seq); locked != (m.State == index.Locked) {
				c.lg.eventf(seg, at, "queue %s: message %d is %s but has a lock record: %v", qn, seq, m.State, locked)
			}
			c.record(qn, seq, seq, m.Pos, "its own record", event.Enqueued, event.Scheduled, event.ScheduledHeld, event.Activated, event.Forwarded, event.Transfer,
				event.Restored, event.RestoredCopy, event.Published, event.Copied)
			for i, ref := range q.Overlays(seq) {
				// A topic's copy reads its body from the published record
				// before it, its first overlay.
				if i == 0 && ref.Index < seq && ref.Index > 0 {
					c.record(qn, seq, ref.Index, ref.Pos, "its published record", event.Published, event.Forwarded)
					continue
				}
				// A forwarded or restored message's own record is also its
				// first overlay.
				if ref.Index < seq || ref.Index > at {
					c.lg.eventf(seg, at, "queue %s: message %d has an overlay at index %d, outside its life", qn, seq, ref.Index)
					continue
				}
				c.record(qn, seq, ref.Index, ref.Pos, "an overlay", event.Abandoned, event.Deferred, event.DeadLettered, event.Forwarded,
					event.Restored, event.RestoredCopy, event.TransferDeadLettered, event.Copied)
			}
			if m.Session != 0 {
				if ss := q.Sessions(); ss == nil || ss.ByNo(m.Session) == nil {
					c.lg.eventf(seg, at, "queue %s: message %d refers to session %d, which does not exist", qn, seq, m.Session)
				}
				perSession[m.Session]++
			}
		}
		n := q.Counts()
		if n.Available != byState[index.Available] || n.Locked != byState[index.Locked] ||
			n.Deferred != byState[index.Deferred] || n.Scheduled != byState[index.Scheduled] {
			c.lg.eventf(seg, at, "queue %s: the state sets hold %d/%d/%d/%d available/locked/deferred/scheduled messages, the messages say %d/%d/%d/%d",
				qn, n.Available, n.Locked, n.Deferred, n.Scheduled,
				byState[index.Available], byState[index.Locked], byState[index.Deferred], byState[index.Scheduled])
		}
		if ss := q.Sessions(); ss != nil {
			for _, s := range ss.Sorted() {
				if s.Messages != perSession[s.No] {
					c.lg.eventf(seg, at, "queue %s: session %q counts %d messages, %d refer to it", qn, s.ID, s.Messages, perSession[s.No])
				}
			}
		}
	}
	raw := c.st.Encode(nil)
	back, err := decodeState(raw)
	switch {
	case err != nil:
		c.lg.eventf(seg, at, "the state fails its own consistency checks: %v", err)
	case !bytes.Equal(back.Encode(nil), raw):
		c.lg.eventf(seg, at, "the state changes when encoded and decoded")
	}
}

// record checks that the record of message seq at index still reads back
// where the server reads it from: an archive for a record at or before the
// log's first index (compaction moved it there; the log's first record then
// has a stale position), else the log, at the position the state holds.
func (c *entityCheck) record(qn string, seq, idx uint64, pos event.Position, what string, types ...event.Type) {
	check := func(file string, ev event.Event, err error, where string) {
		switch {
		case err != nil:
			c.lg.eventf(file, idx, "queue %s: message %d needs %s at index %d, %s, which does not read back: %s", qn, seq, what, idx, where, archiveReason(err))
		case !slices.Contains(types, ev.Type):
			c.lg.eventf(file, idx, "queue %s: message %d needs %s at index %d, but that record is %s", qn, seq, what, idx, ev.Type)
		}
	}
	if idx <= c.first {
		for _, a := range c.archives {
			if a.Has(idx) {
				ev, err := a.Read(idx)
				check(filepath.Base(a.Path()), ev, err, "in the archive")
				return
			}
		}
	}
	if idx < c.first {
		which := "no archive"
		if c.unopened {
			which = "no archive that opens"
		}
		c.lg.eventf("", idx, "queue %s: message %d needs %s at index %d, but the log starts at %d and %s holds it", qn, seq, what, idx, c.first, which)
		return
	}
	if idx > c.lg.last {
		c.lg.eventf("", idx, "queue %s: message %d needs %s at index %d, past the last readable record (%d)", qn, seq, what, idx, c.lg.last)
		return
	}
	ev, err := c.ro.ReadAt(idx, pos)
	check(segmentOf(c.ro, idx), ev, err, fmt.Sprintf("offset %d", pos.Offset))
}

// archives checks the archives in dir, where compaction keeps the records
// still needed from before the log's first index: each opens (its index and
// its checksum), every record in it reads back (its block, the envelope's
// checksum, decoding, the index it holds), and none is past the log's
// first index (see pastLogStart). It returns the archives that open,
// newest first, and whether any did not.
func (v *verifier) archives(label, dir string, ro *log.ReadOnly, first uint64) (open []*log.Archive, unopened bool) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		v.add(label, layout.Archive, 0, "archive directory unreadable: %v", err)
		return nil, true
	}
	var names []string
	for _, ent := range ents {
		switch name := ent.Name(); {
		case ent.IsDir():
		case strings.HasSuffix(name, ".wba"):
			names = append(names, name)
		case strings.HasSuffix(name, ".wba.tmp"):
			v.add(label, name, 0, "an archive an interrupted compaction left unfinished (the server ignores it; walbus compact removes it)")
		}
	}
	slices.Sort(names)
	slices.Reverse(names)
	for _, name := range names {
		a, err := log.OpenArchive(filepath.Join(dir, name))
		if err != nil {
			v.add(label, name, 0, "archive unreadable: %s (the server does not open the entity)", archiveReason(err))
			unopened = true
			continue
		}
		open = append(open, a)
		var bad []uint64
		var reason string
		for _, idx := range a.Indexes() {
			if _, err := a.Read(idx); err != nil {
				if len(bad) == 0 {
					reason = archiveReason(err)
				}
				bad = append(bad, idx)
			}
		}
		if len(bad) > 0 {
			more := ""
			if len(bad) > 1 {
				more = fmt.Sprintf(" (and %s after it)", plural(len(bad)-1, "more record"))
			}
			v.add(label, name, bad[0], "archived record does not read back: %s%s", reason, more)
		}
		v.pastLogStart(label, name, a, ro, first)
	}
	return open, unopened
}

// pastLogStart checks the records archive a holds past the log's first
// index. A compaction archives records below its cut, and the log keeps
// one record before the cut (its first), which may be in both. When the
// log's last segment is empty (it ends on a segment boundary) the log
// keeps more than that, so more records are in both; that is no damage as
// long as the copies are the same. A record the log does not hold, or
// holds differently, is.
func (v *verifier) pastLogStart(label, name string, a *log.Archive, ro *log.ReadOnly, first uint64) {
	if first == 0 || a.Last() <= first {
		return
	}
	idxs := a.Indexes()
	past := idxs[sort.Search(len(idxs), func(i int) bool { return idxs[i] > first }):]
	inLog := make(map[uint64][]byte, len(past))
	want := make(map[uint64]bool, len(past))
	for _, idx := range past {
		want[idx] = true
	}
	scanErr := ro.Scan(past[0], past[len(past)-1], func(ev *event.Event) error {
		if want[ev.Index] {
			inLog[ev.Index] = event.AppendRecord(nil, ev)
		}
		return nil
	})
	var differs, missing []uint64
	for _, idx := range past {
		ev, err := a.Read(idx)
		switch rec, ok := inLog[idx]; {
		case err != nil: // reported with the archive's records
		case !ok && scanErr == nil:
			missing = append(missing, idx)
		case !ok: // damage in the log (reported with it) hides whether it holds the record
		case !bytes.Equal(rec, event.AppendRecord(nil, &ev)):
			differs = append(differs, idx)
		}
	}
	if len(missing) > 0 {
		v.add(label, name, missing[0], "archive holds %s past the log's first index %d that the log does not hold (the first at %d): a compaction archives only records before the log's start",
			plural(len(missing), "record"), first, missing[0])
	}
	if len(differs) > 0 {
		v.add(label, name, differs[0], "archive holds %s the log holds too (the first at %d), and the copies differ",
			plural(len(differs), "record"), differs[0])
	}
}

// segmentOf is the file name of the segment that should hold index.
func segmentOf(ro *log.ReadOnly, index uint64) string {
	name := ""
	for _, s := range ro.Segments() {
		if s.First > index {
			break
		}
		name = filepath.Base(s.Path)
	}
	return name
}

package projection

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/walbus/walbus/broker/replica"
	"github.com/walbus/walbus/broker/replica/simulation"
	"github.com/walbus/walbus/log/event"
)

// TestReplicatedAgainstModel runs the model test's random histories
// through a simulated Raft group (package simulation: a network that
// loses, delays and reorders, crashes, power cuts, snapshots, skewed
// clocks, members replaced). The projection is every member's state
// machine. When the leader has applied its whole log, the history issues
// its next command and the leader decides it, at its own clock, against
// the state it applied; the model decides it too, against the same
// committed state, and the two must agree. The model follows the
// committed log: the first member to apply an index applies its events
// to the model too, and the member's projection must then look as the
// model does. The simulation checks that every other member holds the
// same state at that index. At the end: every acknowledged entry is in
// the committed log as it was acknowledged, every acknowledged message is
// still there or a committed event took it, none was completed twice.
//
// Each seed runs one model configuration, in turn, and one in four keeps
// its members' Raft logs as entity logs on disk. WALBUS_SIM_SEEDS sets how
// many seeds run, WALBUS_SIM_SEED runs one.
func TestReplicatedAgainstModel(t *testing.T) {
	n := 120
	switch {
	case raceEnabled:
		n = 10
	case testing.Short():
		n = 30
	}
	first, n, err := simulation.Seeds(n)
	if err != nil {
		t.Fatal(err)
	}
	names := slices.Sorted(mapsKeys(modelConfigs))
	seen := map[event.Type]int{}
	var stats simulation.Stats
	for seed := first; seed < first+uint64(n); seed++ {
		name := names[seed%uint64(len(names))]
		w := newReplicated(seed, modelConfigs[name])
		cfg := simulation.Config{Seed: seed}
		if seed%4 == 0 {
			// On entity logs on disk (replica.LogStorage), one seed in four.
			cfg.Storage = simulation.OnDisk(filepath.Join(t.TempDir(), fmt.Sprint(seed)))
		}
		st, err := simulation.Run(cfg, w)
		stats.Add(st)
		if err != nil {
			t.Fatalf("seed %d (%s): %v (WALBUS_SIM_SEED=%d runs it alone)", seed, name, err, seed)
		}
		for _, ev := range w.h.events {
			seen[ev.Type]++
		}
	}
	t.Log(stats)
	t.Logf("event types: %v", seen)
	if stats.Runs < len(names) {
		return // one seed: too few to insist on what the histories bring
	}
	// Every event type a queue's history can bring must have come up, or
	// the test proves little (as in TestAgainstModel).
	for _, typ := range event.Types() {
		namespace := typ == event.EntityDeleted || typ == event.ClockAdvanced || typ == event.NodeAddress
		if !namespace && typ != event.Committed && typ != event.Marker && !topicEvent(typ) && seen[typ] == 0 {
			t.Errorf("no %s event in any history", typ)
		}
	}
	if missed := stats.Missed(); stats.Runs >= 20 && len(missed) > 0 {
		t.Errorf("the seeds missed what the simulation means to bring: %v", missed)
	}
}

// replicated is the simulation's workload: a history, whose commands the
// leader decides, and the model, which follows the committed log.
type replicated struct {
	h   *history
	cfg Config
	// queue holds what the history issued and the leader has not decided
	// yet: a step may issue several commands (a tick, then activations),
	// which go one to an entry, each decided against the state its turn
	// finds.
	queue []Command
	// offset is how far the history's "time passes" moved every member's
	// clock, so that a run of a few simulated minutes sees locks,
	// sessions and TTLs run out and schedules come due.
	offset int64
	// model is the last Raft index whose events the model applied.
	model uint64
	acked []ackedEntry
	err   error // the first disagreement
}

// ackedEntry is an entry the leader acknowledged, with its events as the
// leader numbered them.
type ackedEntry struct {
	index  uint64
	cmd    Command
	events []event.Event
}

func newReplicated(seed uint64, cfg Config) *replicated {
	w := &replicated{cfg: cfg}
	// As newHistory's, but the entity is not created here: the group's
	// first entry does that.
	w.h = &history{rng: rand.New(rand.NewPCG(seed, seed*7+1)), e: New(), m: newModel(),
		now: simulation.Start, records: map[uint64]event.Event{}, sendVia: true,
		exec: func(cmd Command) { w.queue = append(w.queue, cmd) }, fail: w.fail}
	return w
}

func (w *replicated) fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf(format, args...)
	}
}

func (w *replicated) Machine(*simulation.Node) simulation.Machine {
	return &replicaMachine{w: w, e: New()}
}

// Next has the leader decide the history's next command that gives
// events, at max(its clock, the last event's time) (docs/cluster.md,
// "Time"), with the model deciding alongside.
func (w *replicated) Next(leader *simulation.Node) ([]byte, any, error) {
	h := w.h
	e := leader.Machine().(*replicaMachine).e
	h.e = e // step asks the leader's state what is due
	for range 100 {
		if w.err != nil {
			return nil, nil, w.err
		}
		h.now = max(leader.Clock()+w.offset, e.LastTime())
		if len(w.queue) == 0 {
			if !h.m.created {
				// Until the entity's creation commits (its first
				// proposal may be lost with its leader).
				h.run(Configure{Name: "q", Config: w.cfg})
				continue
			}
			before := h.now
			h.step()
			w.offset += h.now - before
			continue
		}
		cmd := w.queue[0]
		w.queue = w.queue[1:]
		if f, ok := cmd.(thunk); ok {
			// What it issues comes before the rest of the queue.
			rest := w.queue
			w.queue = nil
			f()
			w.queue = append(w.queue, rest...)
			continue
		}
		got, gotErr := e.Decide(cmd, h.now)
		want, wantErr := h.m.decide(cmd, h.now)
		if !sameError(gotErr, wantErr) {
			return nil, nil, fmt.Errorf("%T %+v: projection error %v, model error %v", cmd, cmd, gotErr, wantErr)
		}
		if fmt.Sprint(eventKeys(got)) != fmt.Sprint(eventKeys(want)) {
			return nil, nil, fmt.Errorf("%T %+v at %d:\nprojection %v\nmodel      %v", cmd, cmd, h.now, eventKeys(got), eventKeys(want))
		}
		if gotErr == nil && len(got) > 0 {
			return replica.EncodeEntry(0, got), cmd, nil
		}
	}
	return nil, nil, w.err
}

func (w *replicated) Acked(leader *simulation.Node, index uint64, op any) error {
	m := leader.Machine().(*replicaMachine)
	w.acked = append(w.acked, ackedEntry{index: index, cmd: op.(Command), events: m.applied})
	return w.err
}

// Check: what was acknowledged is in the committed log and was not lost
// or completed twice, and the leader ends as the model does.
func (w *replicated) Check(leader *simulation.Node) error {
	if w.err != nil {
		return w.err
	}
	h := w.h
	e := leader.Machine().(*replicaMachine).e
	if e.LastIndex() != uint64(len(h.events)) {
		return fmt.Errorf("the leader ends at event %d, the committed log at %d", e.LastIndex(), len(h.events))
	}
	if a, b := observe(e, h.now), h.m.observe(h.now); a != b {
		return fmt.Errorf("the leader ends otherwise than the model:\nprojection:\n%s\nmodel:\n%s", a, b)
	}
	// What took a message away, by its SequenceNumber.
	taken := map[uint64]event.Type{}
	for _, ev := range h.events {
		switch ev.Type {
		case event.Completed, event.Deleted, event.Expired, event.ReceivedAndDeleted, event.ScheduleCancelled, event.Activated:
			if ev.Type == event.Completed && taken[ev.Seq] == event.Completed {
				return fmt.Errorf("message %d completed twice", ev.Seq)
			}
			taken[ev.Seq] = ev.Type
		}
	}
	present := func(seq uint64) bool {
		for _, no := range []uint32{event.MainQueue, event.DeadLetterQueue, event.TransferQueue, event.TransferDeadLetterQueue} {
			if q := e.Queue(no); q != nil {
				if _, ok := q.Message(seq); ok {
					return true
				}
			}
		}
		return false
	}
	var errs []error
	for _, a := range w.acked {
		for _, ev := range a.events {
			if ev.Index > uint64(len(h.events)) || fmt.Sprint(eventKeys([]event.Event{h.events[ev.Index-1]})) != fmt.Sprint(eventKeys([]event.Event{ev})) {
				errs = append(errs, fmt.Errorf("entry %d (%T), acknowledged, is not in the committed log as it was: event %d %s", a.index, a.cmd, ev.Index, ev.Type))
				break
			}
			switch ev.Type {
			case event.Enqueued, event.Scheduled, event.ScheduledHeld, event.Activated, event.Forwarded, event.Restored, event.Transfer:
				if _, ok := taken[ev.Index]; !ok && !present(ev.Index) {
					errs = append(errs, fmt.Errorf("message %d (%s), acknowledged, is lost", ev.Index, ev.Type))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// replicaMachine is a member's projection. The first member to apply an
// index has the model follow.
type replicaMachine struct {
	w       *replicated
	e       *Entity
	applied []event.Event // the events of the last entry applied
}

// Apply gives the entry's events their log indexes, the next after the
// projection's last, as every member does. An entry without events takes
// one index, as its marker record does in the log.
func (m *replicaMachine) Apply(index uint64, data []byte) error {
	evs := []event.Event{{Type: event.Marker}}
	if data != nil {
		var err error
		if _, evs, err = replica.DecodeEntry(data); err != nil {
			return err
		}
	}
	for i := range evs {
		ev := &evs[i]
		ev.Index = m.e.LastIndex() + 1
		ev.Pos = event.Position{Offset: uint32(ev.Index * 7 % 100000), Size: uint32(event.RecordSize(ev))}
		if err := m.e.Apply(ev); err != nil {
			return fmt.Errorf("event %d (%s): %w", ev.Index, ev.Type, err)
		}
	}
	m.applied = evs
	w := m.w
	if index <= w.model {
		return w.err // the simulation checks this member's state against the first's
	}
	w.model = index
	h := w.h
	for i := range evs {
		ev := evs[i]
		if ev.Index != uint64(len(h.events)+1) {
			return fmt.Errorf("entry %d: event %d follows the committed log's %d", index, ev.Index, len(h.events))
		}
		h.events = append(h.events, ev)
		if ev.Type == event.Scheduled || ev.Type == event.ScheduledHeld {
			h.records[ev.Index] = ev
		}
		h.m.apply(&ev) // a marker only moves its last index
	}
	if data == nil {
		return w.err // nothing changed
	}
	at := evs[0].Time // when the leader decided it
	if a, b := observe(m.e, at), h.m.observe(at); a != b {
		return fmt.Errorf("after entry %d (%s...) states differ:\nprojection:\n%s\nmodel:\n%s", index, evs[0].Type, a, b)
	}
	if got, want := m.e.DueScheduled(0, at), h.dueScheduled(at); fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("after entry %d due scheduled: projection %v model %v", index, got, want)
	}
	return w.err
}

func (m *replicaMachine) Restore(snap *pb.Snapshot) error {
	logIndex, state, err := replica.DecodeSnapshot(snap.GetData())
	if err != nil {
		return err
	}
	e, err := Decode(state)
	if err != nil {
		return err
	}
	if e.LastIndex() != logIndex {
		return fmt.Errorf("a snapshot at log index %d holds a projection at %d", logIndex, e.LastIndex())
	}
	m.e = e
	return nil
}

func (m *replicaMachine) Snapshot() []byte {
	return replica.EncodeSnapshot(m.e.LastIndex(), m.e.Encode(nil))
}

func (m *replicaMachine) Digest() []byte {
	d := sha256.Sum256(m.e.Encode(nil))
	return d[:]
}

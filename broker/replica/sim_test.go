package replica_test

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/walbus/walbus/broker/replica"
	"github.com/walbus/walbus/broker/replica/simulation"
	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// TestSimulatedGroup runs an entity's group under the simulation
// (package simulation: faults of the network, crashes, pauses, power
// cuts, snapshots, skewed clocks, members replaced). The entity's
// projection is the state machine and the leader decides clients'
// operations (sends, locks, settlements, timer ticks), as the broker's
// actor will. Besides the simulation's own checks, at the end: every
// acknowledged send is still there or its completion was asked for, no
// message was completed twice, none is still there after its completion
// was acknowledged.
//
// WALBUS_SIM_SEEDS sets how many seeds run (200 by default, 20 under the
// race detector or -short; make full-size runs 2,000); WALBUS_SIM_SEED
// runs one.
func TestSimulatedGroup(t *testing.T) {
	n := 200
	if raceEnabled || testing.Short() {
		n = 20
	}
	first, n, err := simulation.Seeds(n)
	if err != nil {
		t.Fatal(err)
	}
	var stats simulation.Stats
	for seed := first; seed < first+uint64(n); seed++ {
		st, err := simulation.Run(simulation.Config{Seed: seed}, newEntityWorkload(seed))
		stats.Add(st)
		if err != nil {
			t.Fatalf("seed %d: %v (WALBUS_SIM_SEED=%d runs it alone)", seed, err, seed)
		}
	}
	t.Log(stats)
	if missed := stats.Missed(); stats.Runs >= 20 && len(missed) > 0 {
		t.Errorf("the seeds missed what the simulation means to bring: %v", missed)
	}
}

// TestSimulatedGroupOnDisk is TestSimulatedGroup with every member's
// Raft log an entity log on disk (replica.LogStorage): entries as record
// groups, markers, hard state and snapshot files, logs cut back, cut in
// front and reset after a snapshot from the leader, and the numbering of
// events by log index checked by every snapshot taken. WALBUS_SIM_SEEDS
// sets how many seeds run (40 by default, 8 under the race detector or
// -short).
func TestSimulatedGroupOnDisk(t *testing.T) {
	n := 40
	if raceEnabled || testing.Short() {
		n = 8
	}
	first, n, err := simulation.Seeds(n)
	if err != nil {
		t.Fatal(err)
	}
	var stats simulation.Stats
	for seed := first; seed < first+uint64(n); seed++ {
		dir := filepath.Join(t.TempDir(), fmt.Sprint(seed))
		st, err := simulation.Run(simulation.Config{Seed: seed, Storage: simulation.OnDisk(dir)}, newEntityWorkload(seed))
		stats.Add(st)
		if err != nil {
			t.Fatalf("seed %d: %v (WALBUS_SIM_SEED=%d runs it alone)", seed, err, seed)
		}
		os.RemoveAll(dir)
	}
	t.Log(stats)
	if missed := stats.Missed(); stats.Runs >= 8 && len(missed) > 0 {
		t.Errorf("the seeds missed what the simulation means to bring: %v", missed)
	}
}

const lockDuration = 2 * time.Second

// entityWorkload is the clients of one queue, and its projection as each
// member's state machine.
type entityWorkload struct {
	rng    *rand.Rand
	nextID uint64
	// The clients' history.
	ackedSends     map[uint64]string // SequenceNumber -> MessageId, acknowledged
	ackedCompletes map[uint64]int    // SequenceNumber -> acknowledged completions
	triedCompletes map[uint64]bool   // completions asked, whatever came of them
	configured     bool
}

func newEntityWorkload(seed uint64) *entityWorkload {
	return &entityWorkload{rng: rand.New(rand.NewPCG(seed, seed^0x5bd1e995)),
		ackedSends: map[uint64]string{}, ackedCompletes: map[uint64]int{}, triedCompletes: map[uint64]bool{}}
}

// op is a client's operation the leader proposed.
type op struct {
	kind    string // configure, send, lock, settle, tick
	outcome projection.Outcome
	seq     uint64 // of the message settled
}

func (w *entityWorkload) Machine(*simulation.Node) simulation.Machine {
	return &entityMachine{e: projection.New(), tokens: map[event.LockToken]lockHeld{}}
}

// Next has the leader decide one operation, against the state it
// applied, and stamp it with its own clock, never earlier than the log's
// last event (docs/cluster.md, "Time").
func (w *entityWorkload) Next(leader *simulation.Node) ([]byte, any, error) {
	m := leader.Machine().(*entityMachine)
	e := m.e
	var cmd projection.Command
	o := &op{}
	switch r := w.rng.IntN(100); {
	case !w.configured:
		cfg := projection.DefaultConfig()
		cfg.LockDuration = lockDuration
		cfg.MaxDeliveryCount = 3
		cmd, o.kind = projection.Configure{Name: "orders", Config: cfg}, "configure"
	case r < 40:
		var msgs []projection.Message
		for range 1 + w.rng.IntN(3) {
			w.nextID++
			id := fmt.Sprintf("m%d", w.nextID)
			msgs = append(msgs, projection.Message{Body: []byte("body of " + id), MessageID: id})
		}
		cmd, o.kind = projection.Send{Queue: event.MainQueue, Messages: msgs}, "send"
	case r < 65:
		cmd, o.kind = projection.Lock{Queue: event.MainQueue, Receiver: "r" + strconv.Itoa(w.rng.IntN(3)),
			Max: 1 + w.rng.IntN(3), Limit: e.LastIndex(), Nonce: w.rng.Uint64()}, "lock"
	case r < 90:
		tokens := m.lockedTokens()
		if len(tokens) == 0 {
			return nil, nil, nil
		}
		held := tokens[w.rng.IntN(len(tokens))]
		o.kind, o.seq = "settle", held.seq
		o.outcome = []projection.Outcome{projection.Complete, projection.Complete, projection.Abandon,
			projection.DeadLetter, projection.Defer}[w.rng.IntN(5)]
		if o.outcome == projection.Complete {
			w.triedCompletes[held.seq] = true
		}
		cmd = projection.Settle{Queue: held.queue, Token: held.token, Outcome: o.outcome}
	default:
		cmd, o.kind = projection.Tick{}, "tick"
	}
	evs, err := e.Decide(cmd, max(leader.Clock(), m.lastTime))
	if err != nil || len(evs) == 0 {
		return nil, nil, nil // refused, or nothing to do: the client's answer needs no entry
	}
	return replica.EncodeEntry(0, evs), o, nil
}

// Acked is the answer to a client whose operation committed.
func (w *entityWorkload) Acked(leader *simulation.Node, _ uint64, v any) error {
	o := v.(*op)
	switch o.kind {
	case "configure":
		w.configured = true
	case "send":
		for _, ev := range leader.Machine().(*entityMachine).applied {
			if ev.Type == event.Enqueued {
				w.ackedSends[ev.Index] = ev.MessageID
			}
		}
	case "settle":
		if o.outcome == projection.Complete {
			if w.ackedCompletes[o.seq]++; w.ackedCompletes[o.seq] > 1 {
				return fmt.Errorf("message %d completed twice", o.seq)
			}
		}
	}
	return nil
}

// Check: nothing acknowledged was lost or completed twice.
func (w *entityWorkload) Check(leader *simulation.Node) error {
	e := leader.Machine().(*entityMachine).e
	present := func(seq uint64) bool {
		for _, q := range []uint32{event.MainQueue, event.DeadLetterQueue} {
			if queue := e.Queue(q); queue != nil {
				if _, ok := queue.Message(seq); ok {
					return true
				}
			}
		}
		return false
	}
	var errs []error
	for _, seq := range slices.Sorted(maps.Keys(w.ackedSends)) {
		if !present(seq) && !w.triedCompletes[seq] {
			errs = append(errs, fmt.Errorf("acknowledged send %d (%s) is lost", seq, w.ackedSends[seq]))
		}
	}
	for _, seq := range slices.Sorted(maps.Keys(w.ackedCompletes)) {
		if present(seq) {
			errs = append(errs, fmt.Errorf("message %d is still there after its completion was acknowledged", seq))
		}
	}
	return errors.Join(errs...)
}

// entityMachine is the entity's projection as the group's state machine.
type entityMachine struct {
	e        *projection.Entity
	lastTime int64
	tokens   map[event.LockToken]lockHeld // locks seen applied, some since settled
	applied  []event.Event                // the events of the last entry applied
}

type lockHeld struct {
	queue uint32
	seq   uint64
	token event.LockToken
}

// Apply gives the entry's events their log indexes, the next after the
// projection's last (the same on every member, since they apply the same
// entries in the same order), and applies them. An entry without events
// takes one index, as its marker record does in the log.
func (m *entityMachine) Apply(_ uint64, data []byte) error {
	evs, err := entryEvents(data)
	if err != nil {
		return err
	}
	for i := range evs {
		ev := &evs[i]
		ev.Index = m.e.LastIndex() + 1
		ev.Pos = event.Position{Offset: uint32(ev.Index * 7 % 100000), Size: uint32(event.RecordSize(ev))}
		if err := m.e.Apply(ev); err != nil {
			return fmt.Errorf("event %d (%s): %w", ev.Index, ev.Type, err)
		}
		m.lastTime = max(m.lastTime, ev.Time)
		if ev.Type == event.Locked {
			m.tokens[ev.Token] = lockHeld{queue: ev.Queue, seq: ev.Seq, token: ev.Token}
		}
	}
	m.applied = evs
	return nil
}

func (m *entityMachine) Digest() []byte {
	d := sha256.Sum256(m.e.Encode(nil))
	return d[:]
}

// lockedTokens are the locks of the messages still locked, in
// SequenceNumber order.
func (m *entityMachine) lockedTokens() []lockHeld {
	var out []lockHeld
	for _, h := range m.tokens {
		if q := m.e.Queue(h.queue); q != nil {
			if meta, ok := q.Message(h.seq); ok && meta.State == index.Locked {
				out = append(out, h)
			}
		}
	}
	slices.SortFunc(out, func(a, b lockHeld) int { return int(a.seq) - int(b.seq) })
	return out
}

// Snapshot is the machine's state for a Raft snapshot: the log index it
// reaches, the last event's time, the projection.
func (m *entityMachine) Snapshot() []byte {
	state := binary.BigEndian.AppendUint64(nil, uint64(m.lastTime))
	return replica.EncodeSnapshot(m.e.LastIndex(), m.e.Encode(state))
}

func (m *entityMachine) Restore(snap *pb.Snapshot) error {
	logIndex, data, err := replica.DecodeSnapshot(snap.GetData())
	if err != nil {
		return err
	}
	if len(data) < 8 {
		return fmt.Errorf("snapshot of %d bytes", len(data))
	}
	e, err := projection.Decode(data[8:])
	if err != nil {
		return err
	}
	if e.LastIndex() != logIndex {
		return fmt.Errorf("a snapshot at log index %d holds a projection at %d", logIndex, e.LastIndex())
	}
	m.e, m.lastTime = e, int64(binary.BigEndian.Uint64(data))
	clear(m.tokens)
	return nil
}

// entryEvents are the events of an entry's data, or for an entry
// without events (nil data) its marker, which takes an index and changes
// nothing.
func entryEvents(data []byte) ([]event.Event, error) {
	if data == nil {
		return []event.Event{{Type: event.Marker}}, nil
	}
	_, evs, err := replica.DecodeEntry(data)
	return evs, err
}

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/tools/compaction"
)

// ordersQueue opens a broker on dir with a fake clock and creates the
// queue "orders" in it, with a receiver whose deliveries arrive on the
// channel returned.
func ordersQueue(t *testing.T, opts broker.Options) (*broker.Broker, *broker.Entity, *broker.Receiver, chan broker.Delivery) {
	t.Helper()
	opts.Clock, opts.Seed = broker.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), 1
	b, _, err := broker.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	q, err := b.CreateQueue("orders", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	deliveries := make(chan broker.Delivery, 2)
	r, err := q.Attach(broker.ReceiverOptions{Name: "r", Deliver: func(d broker.Delivery) { deliveries <- d }})
	if err != nil {
		t.Fatal(err)
	}
	return b, q, r, deliveries
}

// sendWait sends msgs as one batch and waits for the broker's answer.
func sendWait(t *testing.T, q *broker.Entity, msgs ...projection.Message) {
	t.Helper()
	sent := make(chan error, 1)
	q.Send(event.MainQueue, msgs, func(err error) { sent <- err })
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

// settleWait settles d with outcome and waits for the broker's answer.
func settleWait(t *testing.T, q *broker.Entity, d broker.Delivery, outcome projection.Outcome) {
	t.Helper()
	done := make(chan error, 1)
	q.Settle(event.MainQueue, broker.Settlement{Token: d.Token, Outcome: outcome}, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// toolData writes a data directory with one queue: two messages, the
// first completed, the second abandoned once, and the snapshot a graceful
// stop writes (here of even so few events).
func toolData(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	b, q, r, deliveries := ordersQueue(t, broker.Options{Dir: dir, FinalSnapshotMin: 1})
	sendWait(t, q, projection.Message{MessageID: "a", Body: []byte("one")}, projection.Message{MessageID: "b", Body: []byte("two")})
	r.SetLimit(2)
	for _, outcome := range []projection.Outcome{projection.Complete, projection.Abandon} {
		settleWait(t, q, <-deliveries, outcome)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// toolCase is one run of a tool: its exit code and what its stdout holds.
type toolCase struct {
	name string
	args []string
	code int
	want []string // in stdout
}

// checkTools runs each case and reports every difference.
func checkTools(t *testing.T, cases []toolCase) {
	t.Helper()
	for _, c := range cases {
		code, out, errOut := runToolT(c.name, c.args...)
		if code != c.code {
			t.Errorf("%s %v: exit %d, want %d\nstdout: %s\nstderr: %s", c.name, c.args, code, c.code, out, errOut)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s %v: output lacks %q:\n%s", c.name, c.args, w, out)
			}
		}
	}
}

func runToolT(name string, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := runTool(name, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestToolCommands(t *testing.T) {
	data := toolData(t)
	checkTools(t, []toolCase{
		{"replay", []string{"--data", data}, 0, []string{"# $namespace", "entity-created", "# orders", "enqueued", "abandoned", "deliveries=1"}},
		{"replay", []string{"--data", data, "--entity", "ORDERS", "--type", "locked", "--format", "json"}, 0, []string{`"type":"locked"`, `"lock_token":`}},
		{"replay", []string{"--data", data, "--entity", "orders", "--from", "2026-01-01T00:00:00Z", "--to", "3", "--bodies"}, 0, []string{`body="one"`}},
		{"audit", []string{"--data", data, "--entity", "orders", "--message-id", "b"}, 0, []string{"orders seq 3, id b", "abandoned: failed deliveries now 1", "now: available in main"}},
		{"audit", []string{"--data", data, "--entity", "orders", "--seq", "2", "--format", "json"}, 0, []string{`"outcome":"completed"`}},
		{"state", []string{"--data", data, "--entity", "orders"}, 0, []string{"main            1", "oldest message seq 3"}},
		{"state", []string{"--data", data, "--entity", "orders", "--at", "3", "--format", "json"}, 0, []string{`"index":3`, `"available":2`}},
		{"verify", []string{"--data", data}, 0, []string{"clean"}},
		{"dump", []string{"--data", data}, 0, []string{"00000000000000000001", "snap-", "total: 2 logs"}},
		{"dump", []string{"--data", data, "--entity", "orders", "--format", "json"}, 0, []string{`"segments":[{`}},
		// Mistakes are the user's: exit status 2.
		{"replay", []string{"--data", data, "--type", "nonsense"}, 2, nil},
		{"replay", []string{"--data", data, "--from", "yesterday"}, 2, nil},
		{"audit", []string{"--data", data, "--entity", "orders"}, 2, nil},
		{"state", []string{"--data", data}, 2, nil},
		{"verify", []string{"--data", filepath.Join(data, "nope")}, 2, nil},
		{"dump", []string{"--data", data, "--format", "xml"}, 2, nil},
		{"dump", []string{"--data", data, "extra"}, 2, nil},
		// A well-formed request that finds nothing: 1.
		{"audit", []string{"--data", data, "--entity", "orders", "--seq", "99"}, 1, nil},
		{"state", []string{"--data", data, "--entity", "missing"}, 1, nil},
	})
	if code, _, _ := runToolT("replay", "--help"); code != 0 {
		t.Errorf("--help: exit %d", code)
	}
}

// verify exits 1 with one finding per line; JSON findings decode.
func TestToolVerifyFindings(t *testing.T) {
	data := toolData(t)
	segs, err := filepath.Glob(filepath.Join(data, "entities", "*", "log", "0*"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments: %v %v", segs, err)
	}
	last := segs[len(segs)-1]
	b, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(last, b[:len(b)-2], 0o640); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runToolT("verify", "--data", data)
	if code != 1 || !strings.Contains(out, "orders/"+filepath.Base(last)+"/") || !strings.Contains(out, "torn tail") {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}
	code, out, _ = runToolT("verify", "--data", data, "--format", "json")
	if code != 1 {
		t.Fatalf("verify --format json: exit %d", code)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var f struct{ Entity, File, Problem string }
		if err := json.Unmarshal([]byte(line), &f); err != nil || f.Entity == "" || f.Problem == "" {
			t.Fatalf("finding %q: %v", line, err)
		}
	}
	// A torn tail is what the server cuts: state and audit show what it
	// would have; replay says the log did not read to its end.
	for _, args := range [][]string{{"state", "--entity", "orders"}, {"audit", "--entity", "orders", "--seq", "2"}, {"replay"}} {
		want := 0
		if args[0] == "replay" {
			want = 1
		}
		if code, out, errOut := runToolT(args[0], append(args[1:], "--data", data)...); code != want || out == "" {
			t.Errorf("%v on a torn log: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, want, out, errOut)
		}
	}
	after, _ := os.ReadFile(last)
	if len(after) != len(b)-2 {
		t.Fatal("verify changed the segment")
	}

	// Damage before the tail: the tools show what reads back, and exit 1.
	ro, err := log.OpenReadOnly(filepath.Dir(last))
	if err != nil {
		t.Fatal(err)
	}
	var at int64
	ro.WalkSegment(1, func(rec log.RecordInfo) error {
		if rec.Event.Type == event.Completed {
			at = rec.Offset + int64(rec.Size) - 1
		}
		return nil
	})
	ro.Close()
	if at == 0 {
		t.Fatal("no completed record")
	}
	b[at] ^= 0x40
	if err := os.WriteFile(last, b, 0o640); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"state", "--entity", "orders"}, {"audit", "--entity", "orders", "--seq", "2"}, {"replay"}} {
		if code, out, errOut := runToolT(args[0], append(args[1:], "--data", data)...); code != 1 || out == "" || errOut == "" {
			t.Errorf("%v on a corrupt log: exit %d\nstdout: %s\nstderr: %s", args, code, out, errOut)
		}
	}
}

// compactedToolData writes a queue whose first message is deferred, then
// forty more completed over small segments, and compacts it keeping the
// dropped history: the data directory and the history's.
func compactedToolData(t *testing.T) (data, retained string) {
	t.Helper()
	data, retained = t.TempDir(), filepath.Join(t.TempDir(), "history")
	b, q, r, deliveries := ordersQueue(t, broker.Options{Dir: data, SegmentSize: 2 << 10})
	for i := range 41 {
		sendWait(t, q, projection.Message{MessageID: fmt.Sprint("m-", i), Body: bytes.Repeat([]byte("b"), 100)})
		r.SetLimit(uint64(i + 1))
		outcome := projection.Complete
		if i == 0 {
			outcome = projection.Defer
		}
		settleWait(t, q, <-deliveries, outcome)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	reps, err := compaction.Compact(data, compaction.Options{Retain: retained})
	if err != nil || len(reps) != 1 || reps[0].Archived == 0 || reps[0].Retained == "" {
		t.Fatalf("compact: %+v %v", reps, err)
	}
	return data, retained
}

// The tools on a compacted directory: archived records replayed and
// marked, --retained for replay, audit and dump, and a clean verify; a
// --retained directory that does not exist is the user's mistake.
func TestToolCommandsCompacted(t *testing.T) {
	data, retained := compactedToolData(t)
	checkTools(t, []toolCase{
		{"replay", []string{"--data", data, "--entity", "orders", "--to", "3"}, 0, []string{"id=m-0 size=100 source=archive"}},
		{"replay", []string{"--data", data, "--entity", "orders", "--to", "3", "--retained", retained, "--format", "json"}, 0,
			[]string{`"source":"retained","index":1,`, `"source":"archive","index":2,`, `"source":"retained","index":3,`, `"deliveries":0`}},
		{"audit", []string{"--data", data, "--entity", "orders", "--seq", "2"}, 0, []string{"[archived]", "was compacted away", "now: deferred in main"}},
		{"audit", []string{"--data", data, "--entity", "orders", "--seq", "2", "--retained", retained}, 0, []string{"[retained history]", "deferred: now received only by its SequenceNumber"}},
		{"state", []string{"--data", data, "--entity", "orders"}, 0, []string{"oldest message seq 2 id m-0 (archived in arc-"}},
		{"verify", []string{"--data", data}, 0, []string{"clean"}},
		{"dump", []string{"--data", data, "--retained", retained}, 0, []string{"archive ", "arc-0", "retained history", "history-0"}},
		{"dump", []string{"--data", data, "--format", "json"}, 0, []string{`"archives":[{"name":"arc-`}},
		{"replay", []string{"--data", data, "--retained", filepath.Join(retained, "nope")}, 2, nil},
		{"audit", []string{"--data", data, "--entity", "orders", "--seq", "2", "--retained", filepath.Join(retained, "nope")}, 2, nil},
	})
	// A damaged archive: verify finds it, replay reads what it can and fails.
	arcs, err := filepath.Glob(filepath.Join(data, "entities", "*", "archive", "*.wba"))
	if err != nil || len(arcs) != 1 {
		t.Fatalf("archives %v: %v", arcs, err)
	}
	b, err := os.ReadFile(arcs[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(arcs[0], b[:len(b)-1], 0o640); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runToolT("verify", "--data", data); code != 1 || !strings.Contains(out, "orders/"+filepath.Base(arcs[0])+"/-: archive unreadable") {
		t.Errorf("verify of a damaged archive: exit %d\n%s", code, out)
	}
	if code, out, errOut := runToolT("replay", "--data", data, "--entity", "orders"); code != 1 || out == "" || !strings.Contains(errOut, "unreadable") {
		t.Errorf("replay with a damaged archive: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

func TestToolHelpMentionsRetained(t *testing.T) {
	for _, name := range []string{"replay", "audit", "dump"} {
		_, _, errOut := runToolT(name, "--help")
		if !strings.Contains(errOut, "--retained DIR") || !strings.Contains(errOut, "-retained string") {
			t.Errorf("%s --help:\n%s", name, errOut)
		}
	}
}

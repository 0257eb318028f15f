package broker

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// TestScripts runs the golden scripts in testdata/scripts against a real
// broker (real logs on disk) with a manual clock. Rewrite the expected
// output with: go test ./broker -run TestScripts -rewrite
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/scripts", func(t *testing.T, path string) {
		h := &harness{t: t, dir: t.TempDir(), clock: NewFakeClock(scriptEpoch)}
		h.open()
		defer func() {
			if h.b != nil {
				h.b.Close()
			}
		}()
		datadriven.RunTest(t, path, h.run)
	})
}

var scriptEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type harness struct {
	t     *testing.T
	dir   string
	clock *FakeClock
	b     *Broker

	mu      sync.Mutex
	pending []string // deliveries and async results not yet printed
	rcv     map[string]*scriptReceiver
	tokens  map[string]event.LockToken // "entity/queue/seq" -> last lock token seen
}

type scriptReceiver struct {
	name  string
	e     *Entity
	r     *Receiver
	queue uint32
	limit uint64
}

func (h *harness) open() {
	b, rec, err := Open(Options{Dir: h.dir, Clock: h.clock, Seed: 1, SegmentSize: 64 << 10, FinalSnapshotMin: 1})
	if err != nil {
		h.t.Fatalf("open: %v", err)
	}
	h.b = b
	h.rcv = map[string]*scriptReceiver{}
	if h.tokens == nil {
		h.tokens = map[string]event.LockToken{}
	}
	for _, e := range rec.Entities {
		h.note(fmt.Sprintf("recovered %s: snapshot at %d, %d events replayed", e.Name, e.Snapshot, e.Replayed))
	}
}

func (h *harness) note(s string) {
	h.mu.Lock()
	h.pending = append(h.pending, s)
	h.mu.Unlock()
}

// settle waits until every entity has processed everything, including the
// timers that came due (at once) while it did.
func (h *harness) settle() {
	for h.b != nil {
		fired := h.clock.Fired()
		for _, e := range h.b.Entities() {
			e.Sync()
		}
		if h.clock.Fired() == fired {
			return
		}
	}
}

// flush settles the broker and returns what happened asynchronously
// meanwhile.
func (h *harness) flush() string {
	h.settle()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := strings.Join(h.pending, "\n")
	h.pending = nil
	return out
}

func (h *harness) run(t *testing.T, td *datadriven.TestData) string {
	out, err := h.exec(t, td)
	if err != nil {
		out = join(out, "error: "+errName(err))
	}
	out = join(out, h.flush())
	if out == "" {
		return "ok\n"
	}
	return out + "\n"
}

func join(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "\n" + b
}

// errName renders an error by the condition it maps to.
func errName(err error) string {
	for _, known := range []error{projection.ErrLockLost, projection.ErrSessionLockLost, projection.ErrSessionCannotBeLocked,
		projection.ErrMessageNotFound, projection.ErrMessageTooLarge, projection.ErrSessionIDRequired, projection.ErrNotAllowed,
		projection.ErrInvalid, ErrTimeout, ErrEntityNotFound, ErrEntityExists, ErrBadName, ErrClosed} {
		if errors.Is(err, known) {
			return known.Error()
		}
	}
	return err.Error()
}

func (h *harness) exec(t *testing.T, td *datadriven.TestData) (string, error) {
	a := args{t, td}
	switch td.Cmd {
	case "create", "update":
		cfg := projection.DefaultConfig()
		cfg.LockDuration = a.dur("lock", cfg.LockDuration)
		cfg.MaxDeliveryCount = a.int("max-delivery", cfg.MaxDeliveryCount)
		cfg.DefaultTTL = a.dur("ttl", 0)
		cfg.DeadLetterOnExpiry = a.has("dlq-on-expiry")
		cfg.RequiresSession = a.has("sessions")
		if a.has("dedup") {
			cfg.RequiresDuplicateDetection = true
			cfg.DuplicateWindow = a.dur("dedup", cfg.DuplicateWindow)
		}
		cfg.MaxMessageSize = a.int("max-size", cfg.MaxMessageSize)
		cfg.ForwardTo = a.str("forward", "")
		if td.Cmd == "update" {
			return "", h.b.UpdateQueue(a.str("q", ""), cfg)
		}
		_, err := h.b.CreateQueue(a.str("q", ""), cfg)
		return "", err
	case "delete":
		return "", h.b.DeleteEntity(a.str("q", ""))
	case "send", "schedule":
		e, q := h.entity(a)
		var msgs []projection.Message
		ids := a.list("id")
		if len(ids) == 0 {
			ids = []string{""}
		}
		for _, id := range ids {
			m := projection.Message{MessageID: id, SessionID: a.str("session", ""), TTL: a.dur("ttl", 0)}
			m.Body = []byte(a.str("body", "body-"+id))
			if size := a.int("size", 0); size > 0 {
				m.Body = make([]byte, size)
			}
			if at := a.str("at", ""); at != "" {
				m.ScheduledAt = h.clock.Now().Add(parseDur(t, at)).UnixNano()
			}
			msgs = append(msgs, m)
		}
		ch := make(chan string, 1)
		if td.Cmd == "send" {
			e.Send(q, msgs, func(err error) { ch <- errString(err) })
			return <-ch, nil
		}
		e.Schedule(q, msgs, func(seqs []uint64, err error) {
			ch <- join(fmt.Sprintf("seqs %v", seqs), errString(err))
		})
		return <-ch, nil
	case "cancel":
		e, q := h.entity(a)
		ch := make(chan error, 1)
		e.Cancel(q, a.seqs("seq"), func(err error) { ch <- err })
		return "", <-ch
	case "batch-delete":
		// before=-30s: enqueued more than 30s ago; none: no cut-off.
		e, q := h.entity(a)
		before := int64(math.MaxInt64)
		if at := a.str("before", ""); at != "" {
			before = h.clock.Now().Add(parseDur(t, at)).UnixNano()
		}
		ch := make(chan string, 1)
		e.Delete(q, a.int("max", 10), before, a.str("session", ""), func(n int, err error) {
			ch <- join(fmt.Sprintf("deleted %d", n), errString(err))
		})
		return <-ch, nil
	case "attach":
		e, q := h.entity(a)
		name := a.str("name", "r1")
		mode := PeekLock
		if a.str("mode", "") == "rad" {
			mode = ReceiveAndDelete
		}
		sr := &scriptReceiver{name: name, e: e, queue: q}
		r, err := e.Attach(ReceiverOptions{Queue: q, Name: name, Mode: mode, Sessions: a.has("sessions"),
			Deliver: func(d Delivery) { h.delivered(name, e, d) },
			Lost:    func(err error) { h.note(fmt.Sprintf("%s lost: %s", name, errName(err))) }})
		if err != nil {
			return "", err
		}
		sr.r = r
		h.rcv[name] = sr
		return "", nil
	case "credit":
		sr := h.receiver(a)
		sr.limit += uint64(a.int("n", 1))
		sr.r.SetLimit(sr.limit)
		return "", nil
	case "receive":
		// attach (if needed) and grant credit in one step
		name := a.str("name", "r1")
		if h.rcv[name] == nil {
			if _, err := h.exec(t, &datadriven.TestData{Cmd: "attach", CmdArgs: td.CmdArgs}); err != nil {
				return "", err
			}
		}
		return h.exec(t, &datadriven.TestData{Cmd: "credit", CmdArgs: td.CmdArgs})
	case "drain":
		sr := h.receiver(a)
		ch := make(chan uint64, 1)
		sr.r.Drain(func(n uint64) { ch <- n })
		n := <-ch
		sr.limit = n
		return fmt.Sprintf("%s drained: %d delivered in all", sr.name, n), nil
	case "detach":
		sr := h.receiver(a)
		var unsent []event.LockToken
		for _, seq := range a.seqs("unsent") {
			unsent = append(unsent, h.tokens[h.key(sr.e, sr.queue, seq)])
		}
		sr.r.Detach(unsent)
		delete(h.rcv, sr.name)
		return "", nil
	case "complete", "abandon", "release", "defer", "deadletter":
		e, q := h.entity(a)
		outcome := map[string]projection.Outcome{"complete": projection.Complete, "abandon": projection.Abandon,
			"release": projection.Release, "defer": projection.Defer, "deadletter": projection.DeadLetter}[td.Cmd]
		var out []string
		for _, seq := range a.seqs("seq") {
			ch := make(chan error, 1)
			e.Settle(q, Settlement{Token: h.tokens[h.key(e, q, seq)], Outcome: outcome, Props: []byte(a.str("props", "")),
				Reason: a.str("reason", ""), Description: a.str("desc", "")}, func(err error) { ch <- err })
			if err := <-ch; err != nil {
				out = append(out, fmt.Sprintf("seq %d: %s", seq, errName(err)))
			}
		}
		return strings.Join(out, "\n"), nil
	case "renew":
		e, q := h.entity(a)
		var tokens []event.LockToken
		for _, seq := range a.seqs("seq") {
			tokens = append(tokens, h.tokens[h.key(e, q, seq)])
		}
		ch := make(chan string, 1)
		e.Renew(q, tokens, func(until []int64, err error) {
			if err != nil {
				ch <- "error: " + errName(err)
				return
			}
			var s []string
			for _, u := range until {
				s = append(s, h.rel(u))
			}
			ch <- "locked until " + strings.Join(s, ", ")
		})
		return <-ch, nil
	case "peek":
		e, q := h.entity(a)
		ds, err := e.Peek(q, uint64(a.int("from", 1)), a.int("n", 100), a.str("session", ""))
		var lines []string
		for _, d := range ds {
			lines = append(lines, "peek "+h.describe(d))
		}
		if len(lines) == 0 && err == nil {
			lines = append(lines, "peek: nothing")
		}
		return strings.Join(lines, "\n"), err
	case "receive-deferred":
		e, q := h.entity(a)
		mode := PeekLock
		if a.str("mode", "") == "rad" {
			mode = ReceiveAndDelete
		}
		name := a.str("name", "mgmt")
		session := ""
		if sr := h.rcv[name]; sr != nil {
			name, session = sr.r.ID(), sr.r.Session()
		}
		ch := make(chan string, 1)
		e.ReceiveDeferred(q, name, session, a.seqs("seq"), mode, func(ds []Delivery, err error) {
			var lines []string
			for _, d := range ds {
				h.remember(e, d)
				lines = append(lines, "deferred "+h.describe(d))
			}
			ch <- join(strings.Join(lines, "\n"), errString(err))
		})
		return <-ch, nil
	case "accept-session":
		sr := h.receiver(a)
		ch := make(chan string, 1)
		sr.r.AcceptSession(a.str("session", ""), a.dur("wait", 0), func(l SessionLock, err error) {
			msg := fmt.Sprintf("%s accepted session %q, locked until %s", sr.name, l.SessionID, h.rel(l.LockedUntil))
			if err != nil {
				msg = fmt.Sprintf("%s accept-session: %s", sr.name, errName(err))
			}
			select {
			case ch <- msg:
			default:
				h.note(msg) // answered later, while the script went on
			}
		})
		select {
		case msg := <-ch:
			return msg, nil
		case <-time.After(100 * time.Millisecond):
			// A waiting accept-next answers only when a session frees up or
			// its wait runs out; leave the channel for a later note.
			go func() {
				if msg, ok := <-ch; ok {
					h.note(msg)
				}
			}()
			return sr.name + " waiting for a session", nil
		}
	case "renew-session":
		sr := h.receiver(a)
		ch := make(chan string, 1)
		sr.r.RenewSession(func(until int64, err error) {
			ch <- join("session locked until "+h.rel(until), errString(err))
		})
		return <-ch, nil
	case "set-state":
		sr := h.receiver(a)
		ch := make(chan error, 1)
		var state []byte
		if s := a.str("state", ""); s != "" {
			state = []byte(s)
		}
		sr.r.SetSessionState(state, func(err error) { ch <- err })
		return "", <-ch
	case "get-state":
		sr := h.receiver(a)
		state, err := sr.r.SessionState()
		return fmt.Sprintf("state %q", state), err
	case "list-sessions":
		e, q := h.entity(a)
		after := int64(SessionListAll)
		if s := a.str("after", ""); s != "" {
			after = h.clock.Now().Add(parseDur(t, s)).UnixMilli()
		}
		ids, err := e.ListSessions(q, after, a.int("skip", 0), a.int("top", 100))
		return fmt.Sprintf("sessions %v", ids), err
	case "advance":
		// Step from timer to timer so each fires at its own time and sees
		// the effects of the ones before it.
		target := h.clock.Now().Add(parseDur(t, td.CmdArgs[0].Key))
		for {
			next, ok := h.clock.Next()
			if !ok || next.After(target) {
				break
			}
			h.clock.AdvanceTo(next)
			h.settle()
		}
		h.clock.AdvanceTo(target)
		return fmt.Sprintf("now %s", h.rel(h.clock.Now().UnixNano())), nil
	case "crash":
		// Stop without the final snapshots a clean shutdown writes; every
		// acknowledged event is already durable.
		h.flush()
		h.b.shutdown(false)
		h.b = nil
		return "crashed", nil
	case "recover":
		h.open()
		return "", nil
	case "restart":
		h.flush()
		if err := h.b.Close(); err != nil {
			return "", err
		}
		h.open()
		return "", nil
	case "dump":
		e, q := h.entity(a)
		c, err := e.Counts(q)
		if err != nil {
			return "", err
		}
		out := fmt.Sprintf("%s: available %d, locked %d, deferred %d, scheduled %d, total %d",
			h.qname(e, q), c.Available, c.Locked, c.Deferred, c.Scheduled, c.Total)
		peek, _ := h.exec(t, &datadriven.TestData{Cmd: "peek", CmdArgs: td.CmdArgs})
		return join(out, peek), nil
	}
	t.Fatalf("unknown command %q", td.Cmd)
	return "", nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return "error: " + errName(err)
}

// delivered records a delivery to receiver name.
func (h *harness) delivered(name string, e *Entity, d Delivery) {
	h.remember(e, d)
	h.note(name + " <- " + h.describe(d))
}

func (h *harness) remember(e *Entity, d Delivery) {
	if d.Token != (event.LockToken{}) {
		h.mu.Lock()
		h.tokens[h.key(e, d.Queue, d.Seq)] = d.Token
		h.mu.Unlock()
	}
}

func (h *harness) key(e *Entity, q uint32, seq uint64) string {
	return fmt.Sprintf("%s/%d/%d", e.name, q, seq)
}

func (h *harness) qname(e *Entity, q uint32) string {
	if q == event.DeadLetterQueue {
		return e.name + "/$DeadLetterQueue"
	}
	return e.name
}

// describe renders a delivery with times relative to the script's start.
func (h *harness) describe(d Delivery) string {
	s := fmt.Sprintf("seq=%d id=%s body=%q", d.Seq, d.MessageID, d.Message)
	if len(d.Message) > 16 {
		s = fmt.Sprintf("seq=%d id=%s body=%d bytes", d.Seq, d.MessageID, len(d.Message))
	}
	if d.SessionID != "" {
		s += " session=" + d.SessionID
	}
	s += fmt.Sprintf(" deliveries=%d", d.Deliveries)
	switch {
	case d.State == index.Scheduled:
		s += " scheduled-for=" + h.rel(d.ScheduledAt)
	case d.State == index.Locked:
		s += " locked-until=" + h.rel(d.LockedUntil)
	case d.State == index.Deferred:
		s += " deferred"
	}
	if d.Deferred && d.State == index.Locked {
		s += " (deferred)"
	}
	s += " enqueued=" + h.rel(d.EnqueuedAt)
	if d.ExpiresAt > 0 {
		s += " expires=" + h.rel(d.ExpiresAt)
	}
	for _, ov := range d.Overlays {
		s += fmt.Sprintf(" [%s", ov.Type)
		if ov.Reason != "" || ov.Description != "" {
			s += fmt.Sprintf(" %q %q", ov.Reason, ov.Description)
		}
		if len(ov.Props) > 0 {
			s += fmt.Sprintf(" props=%q", ov.Props)
		}
		s += "]"
	}
	return s
}

func (h *harness) rel(ns int64) string {
	if ns == 0 {
		return "never"
	}
	return "+" + time.Duration(ns-scriptEpoch.UnixNano()).String()
}

func (h *harness) entity(a args) (*Entity, uint32) {
	e, err := h.b.Entity(a.str("q", ""))
	if err != nil {
		a.t.Fatalf("%s: %v", a.td.Pos, err)
	}
	if a.has("dlq") {
		return e, event.DeadLetterQueue
	}
	return e, event.MainQueue
}

func (h *harness) receiver(a args) *scriptReceiver {
	sr := h.rcv[a.str("name", "r1")]
	if sr == nil {
		a.t.Fatalf("%s: no receiver %q", a.td.Pos, a.str("name", "r1"))
	}
	return sr
}

// args reads key=value arguments.
type args struct {
	t  *testing.T
	td *datadriven.TestData
}

func (a args) has(key string) bool { return a.td.HasArg(key) }

func (a args) str(key, def string) string {
	if arg, ok := a.td.Arg(key); ok && len(arg.Vals) > 0 {
		return arg.Vals[0]
	}
	return def
}

func (a args) list(key string) []string {
	if arg, ok := a.td.Arg(key); ok {
		return arg.Vals
	}
	return nil
}

func (a args) int(key string, def int) int {
	s := a.str(key, "")
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		a.t.Fatalf("%s: %s=%q: %v", a.td.Pos, key, s, err)
	}
	return n
}

func (a args) seqs(key string) []uint64 {
	var out []uint64
	for _, s := range a.list(key) {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			a.t.Fatalf("%s: %s: %v", a.td.Pos, key, err)
		}
		out = append(out, n)
	}
	return out
}

func (a args) dur(key string, def time.Duration) time.Duration {
	if s := a.str(key, ""); s != "" {
		return parseDur(a.t, s)
	}
	if a.has(key) {
		return def
	}
	return def
}

func parseDur(t *testing.T, s string) time.Duration {
	d, err := time.ParseDuration(strings.TrimPrefix(s, "+"))
	if err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	return d
}

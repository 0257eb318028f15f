package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// scene drives a real broker on a data directory with a manual clock and a
// fixed seed, so the logs it leaves are the same on every run.
type scene struct {
	t     testing.TB
	dir   string
	clock *broker.FakeClock
	b     *broker.Broker
}

var sceneEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newScene(t testing.TB, dir string, segmentSize int) *scene {
	return newSceneWith(t, broker.Options{Dir: dir, SegmentSize: segmentSize})
}

// newSceneWith opens a broker with opts and the scene's clock and seed.
func newSceneWith(t testing.TB, opts broker.Options) *scene {
	t.Helper()
	s := &scene{t: t, dir: opts.Dir, clock: broker.NewFakeClock(sceneEpoch)}
	opts.Clock, opts.Seed = s.clock, 1
	b, _, err := broker.Open(opts)
	if err != nil {
		t.Fatalf("open broker: %v", err)
	}
	s.b = b
	return s
}

func (s *scene) close() {
	s.t.Helper()
	if err := s.b.Close(); err != nil {
		s.t.Fatalf("close broker: %v", err)
	}
}

func (s *scene) queue(name string, cfg projection.Config) *broker.Entity {
	s.t.Helper()
	e, err := s.b.CreateQueue(name, cfg)
	if err != nil {
		s.t.Fatalf("create %s: %v", name, err)
	}
	return e
}

// send sends the messages as one batch; a message is "id" or "id@session".
func (s *scene) send(e *broker.Entity, msgs ...projection.Message) {
	s.t.Helper()
	ch := make(chan error, 1)
	e.Send(event.MainQueue, msgs, func(err error) { ch <- err })
	if err := <-ch; err != nil {
		s.t.Fatalf("send: %v", err)
	}
}

func msg(id, body string) projection.Message {
	return projection.Message{MessageID: id, Body: []byte(body)}
}

// advance moves the clock, letting every timer that comes due run and every
// entity finish what it triggers.
func (s *scene) advance(d time.Duration) {
	target := s.clock.Now().Add(d)
	for {
		next, ok := s.clock.Next()
		if !ok || next.After(target) {
			break
		}
		s.clock.AdvanceTo(next)
		s.sync()
	}
	s.clock.AdvanceTo(target)
	s.sync()
}

func (s *scene) sync() {
	for {
		fired := s.clock.Fired()
		for _, e := range s.b.Entities() {
			e.Sync()
		}
		if s.clock.Fired() == fired {
			return
		}
	}
}

// receiver is a peek-lock receiver that takes messages one credit at a time.
type receiver struct {
	s     *scene
	e     *broker.Entity
	r     *broker.Receiver
	queue uint32
	limit uint64
	ch    chan broker.Delivery
}

func (s *scene) receiver(e *broker.Entity, queue uint32, name string, mode broker.Mode) *receiver {
	s.t.Helper()
	rc := &receiver{s: s, e: e, queue: queue, ch: make(chan broker.Delivery, 100)}
	r, err := e.Attach(broker.ReceiverOptions{Queue: queue, Name: name, Mode: mode,
		Deliver: func(d broker.Delivery) { rc.ch <- d }})
	if err != nil {
		s.t.Fatalf("attach: %v", err)
	}
	rc.r = r
	return rc
}

// take grants one credit and returns the delivery it brings.
func (rc *receiver) take() broker.Delivery {
	rc.s.t.Helper()
	rc.limit++
	rc.r.SetLimit(rc.limit)
	rc.s.sync()
	select {
	case d := <-rc.ch:
		return d
	case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
		rc.s.t.Fatalf("no delivery")
		return broker.Delivery{}
	}
}

func (rc *receiver) settle(d broker.Delivery, outcome projection.Outcome, reason string) {
	rc.s.t.Helper()
	rc.s.settle(rc.e, rc.queue, d, outcome, reason)
}

// settle settles d, however it was received, and waits for the answer.
func (s *scene) settle(e *broker.Entity, queue uint32, d broker.Delivery, outcome projection.Outcome, reason string) {
	s.t.Helper()
	ch := make(chan error, 1)
	e.Settle(queue, broker.Settlement{Token: d.Token, Outcome: outcome, Reason: reason}, func(err error) { ch <- err })
	if err := <-ch; err != nil {
		s.t.Fatalf("settle %d %s: %v", d.Seq, outcome, err)
	}
}

func (rc *receiver) renew(d broker.Delivery) {
	rc.s.t.Helper()
	ch := make(chan error, 1)
	rc.e.Renew(rc.queue, []event.LockToken{d.Token}, func(_ []int64, err error) { ch <- err })
	if err := <-ch; err != nil {
		rc.s.t.Fatalf("renew %d: %v", d.Seq, err)
	}
}

func expectID(t testing.TB, d broker.Delivery, id string) {
	t.Helper()
	if d.MessageID != id {
		t.Fatalf("delivered %s (seq %d), want %s", d.MessageID, d.Seq, id)
	}
}

// buildGolden writes the golden scenario's data directory into dir. Its
// "orders" queue (MaxDeliveryCount 3, 30 s locks):
//
//	seq 2 m-1  locked, renewed, completed
//	seq 3 m-2  abandoned twice, then its third lock expires: dead-lettered
//	seq 4 m-3  deferred
//	seq 5 m-4  still available (sent with m-3 as one batch)
//	seq 6 m-5  scheduled, activated as seq 14, received and deleted
//
// and an empty queue "empty" that is created and deleted.
func buildGolden(t testing.TB, dir string) {
	s := newScene(t, dir, 512)
	cfg := projection.DefaultConfig()
	cfg.LockDuration = 30 * time.Second
	cfg.MaxDeliveryCount = 3
	orders := s.queue("orders", cfg)
	s.queue("empty", projection.DefaultConfig())
	if err := s.b.DeleteEntity("empty"); err != nil {
		t.Fatal(err)
	}
	s.advance(time.Second)
	s.send(orders, msg("m-1", "hello"))
	s.advance(time.Second)
	s.send(orders, msg("m-2", "second message"))
	s.advance(time.Second)
	s.send(orders, msg("m-3", "third"), msg("m-4", "\x00\x53\x75\xa0\x05bytes"))
	sched := msg("m-5", "later")
	sched.ScheduledAt = s.clock.Now().Add(time.Minute).UnixNano()
	s.send(orders, sched)

	r := s.receiver(orders, event.MainQueue, "r1", broker.PeekLock)
	s.advance(time.Second)
	d := r.take()
	expectID(t, d, "m-1")
	s.advance(10 * time.Second)
	r.renew(d)
	s.advance(5 * time.Second)
	r.settle(d, projection.Complete, "")

	for range 2 {
		s.advance(time.Second)
		d = r.take()
		expectID(t, d, "m-2")
		s.advance(2 * time.Second)
		r.settle(d, projection.Abandon, "")
	}
	s.advance(time.Second)
	d = r.take()
	expectID(t, d, "m-2")
	s.advance(31 * time.Second) // the lock runs out: third failed delivery
	d = r.take()
	expectID(t, d, "m-3")
	s.advance(time.Second)
	r.settle(d, projection.Defer, "")

	s.advance(time.Minute) // m-5 activates
	rad := s.receiver(orders, event.MainQueue, "rad", broker.ReceiveAndDelete)
	d = r.take()
	expectID(t, d, "m-4")
	s.advance(time.Second)
	r.settle(d, projection.Release, "")
	d = rad.take()
	expectID(t, d, "m-4")
	d = rad.take()
	expectID(t, d, "m-5")
	s.advance(time.Second)
	s.close()
}

var golden struct {
	once sync.Once
	dir  string
	err  error
}

// goldenDir returns the golden scenario's data directory, built once per
// test binary. Tests must not change it: they copy it first.
func goldenDir(t testing.TB) string {
	t.Helper()
	golden.once.Do(func() {
		dir, err := os.MkdirTemp("", "walbus-tools-golden-")
		if err != nil {
			golden.err = err
			return
		}
		golden.dir = dir
		buildGolden(t, dir)
	})
	if golden.err != nil {
		t.Fatal(golden.err)
	}
	return golden.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, dir := range []string{golden.dir, fuzzBase.dir, fuzzCompacted.dir, compacted.root} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

// copyTree copies the directory tree src to a new temporary directory.
func copyTree(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	copyDir(t, src, dst)
	return dst
}

// copyDir copies the directory tree src to dst.
func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o750)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o640)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// entityDirOf returns the directory of the live entity name in data.
func entityDirOf(t testing.TB, data, name string) EntityInfo {
	t.Helper()
	cat, err := ReadCatalog(data)
	if err != nil {
		t.Fatal(err)
	}
	e, err := cat.Find(name)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func sprintLines(lines []Finding) string {
	s := ""
	for _, l := range lines {
		s += fmt.Sprintln(l)
	}
	return s
}

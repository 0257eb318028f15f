package compaction_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/snapshot"
	"github.com/walbus/walbus/tools/compaction"
)

// history writes an entity's log the way the broker does (Decide, append,
// Apply), without a broker in between, so tests can build large or odd
// histories quickly.
type history struct {
	t     testing.TB
	data  string
	dir   string // the entity's directory
	start time.Time
	now   int64
	seg   int

	l        *log.Log
	st       *projection.Entity
	archives []*log.Archive
	rng      *rand.Rand

	// scheduled keeps Scheduled records for activation (Decide cannot read
	// the log); all keeps every event appended, for the retention checks.
	scheduled map[uint64]event.Event
	all       map[uint64][]byte
}

var start = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// newHistory creates queue "q" through a broker (so the namespace and the
// entity's directory are as the server makes them) and opens its log.
func newHistory(t testing.TB, cfg projection.Config, segmentSize int, seed uint64) *history {
	t.Helper()
	data := t.TempDir()
	b, _, err := broker.Open(broker.Options{Dir: data, Sync: log.SyncNone, Clock: broker.NewFakeClock(start)})
	if err != nil {
		t.Fatal(err)
	}
	create := b.CreateQueue
	if cfg.Topic {
		create = b.CreateTopic
	}
	if _, err := create("q", cfg); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	ents, err := compaction.Entities(data)
	if err != nil || len(ents) != 1 {
		t.Fatalf("entities: %v %v", ents, err)
	}
	h := &history{t: t, data: data, dir: ents[0].Dir, start: start, now: start.UnixNano(), seg: segmentSize,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), scheduled: map[uint64]event.Event{}}
	h.open()
	return h
}

// open opens the entity's log, state and archives as they are on disk.
func (h *history) open() {
	h.t.Helper()
	l, _, err := log.Open(filepath.Join(h.dir, "log"), log.Options{Sync: log.SyncNone, SegmentSize: h.seg})
	if err != nil {
		h.t.Fatal(err)
	}
	st, _, err := snapshot.Rebuild(filepath.Join(h.dir, "snapshots"), l)
	if err != nil {
		h.t.Fatal(err)
	}
	archives, err := log.OpenArchives(filepath.Join(h.dir, "archive"))
	if err != nil {
		h.t.Fatal(err)
	}
	h.l, h.st, h.archives = l, st, archives
}

func (h *history) close() {
	h.t.Helper()
	for _, a := range h.archives {
		a.Close()
	}
	if err := h.l.Close(); err != nil {
		h.t.Fatal(err)
	}
	h.l, h.st, h.archives = nil, nil, nil
}

// do decides cmd, appends and applies its events, and returns them.
func (h *history) do(cmd projection.Command) []event.Event {
	h.t.Helper()
	evs, err := h.st.Decide(cmd, h.now)
	if err != nil {
		h.t.Fatalf("decide %T: %v", cmd, err)
	}
	if len(evs) == 0 {
		return nil
	}
	if _, err := h.l.Append(evs, nil); err != nil {
		h.t.Fatal(err)
	}
	for i := range evs {
		ev := &evs[i]
		if err := h.st.Apply(ev); err != nil {
			h.t.Fatalf("apply %s: %v", ev.Type, err)
		}
		if ev.Type == event.Scheduled {
			h.scheduled[ev.Index] = *ev
		}
		if h.all != nil {
			h.all[ev.Index] = event.AppendRecord(nil, ev)
		}
	}
	return evs
}

func (h *history) advance(d time.Duration) { h.now += int64(d) }

// sync waits until everything appended is written.
func (h *history) sync() {
	h.t.Helper()
	done := make(chan error, 1)
	if _, err := h.l.Append(nil, func(err error) { done <- err }); err != nil {
		h.t.Fatal(err)
	}
	if err := <-done; err != nil {
		h.t.Fatal(err)
	}
}

// message is a bare AMQP message (a data section) whose bytes say which
// message it is, so a mix-up shows.
func message(id uint64, size int) projection.Message {
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(id>>(8*(i%8))) ^ byte(i)
	}
	enc := append([]byte{0x00, 0x53, 0x75, 0xb0}, binary.BigEndian.AppendUint32(nil, uint32(size))...)
	return projection.Message{Body: append(enc, body...), MessageID: fmt.Sprint("m-", id)}
}

// props is an encoded AMQP map {"k": v}: the properties an abandon, defer
// or dead-letter may set.
func props(v string) []byte {
	return append([]byte{0xc1, byte(1 + 3 + 2 + len(v)), 2, 0xa1, 1, 'k', 0xa1, byte(len(v))}, v...)
}

// view is what a client could see of the queue: every message of the main
// and the dead-letter queue as peek returns it (bodies, overlays, states),
// and the counts.
type view struct {
	Main, DLQ             []broker.Delivery
	MainCounts, DLQCounts projection.Counts
}

// peekAll opens a broker on the data directory (at the history's clock, so
// no timer fires) and returns the view; the broker reads every record
// through the same paths a receive does.
func peekAll(t testing.TB, data string, now int64) view {
	t.Helper()
	b, _, err := broker.Open(broker.Options{Dir: data, Sync: log.SyncNone, Clock: broker.NewFakeClock(time.Unix(0, now))})
	if err != nil {
		t.Fatalf("open broker: %v", err)
	}
	defer b.Close()
	e, err := b.Entity("q")
	if err != nil {
		t.Fatal(err)
	}
	var v view
	for _, q := range []struct {
		no     uint32
		out    *[]broker.Delivery
		counts *projection.Counts
	}{{event.MainQueue, &v.Main, &v.MainCounts}, {event.DeadLetterQueue, &v.DLQ, &v.DLQCounts}} {
		from := uint64(0)
		for {
			ds, err := e.Peek(q.no, from, 1000, "")
			if err != nil {
				t.Fatalf("peek queue %d from %d: %v", q.no, from, err)
			}
			if len(ds) == 0 {
				break
			}
			*q.out = append(*q.out, ds...)
			from = ds[len(ds)-1].Seq + 1
		}
		if *q.counts, err = e.Counts(q.no); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

func sameView(t testing.TB, what string, want, got view) {
	t.Helper()
	if got.MainCounts != want.MainCounts || got.DLQCounts != want.DLQCounts {
		t.Fatalf("%s: counts %+v/%+v, want %+v/%+v", what, got.MainCounts, got.DLQCounts, want.MainCounts, want.DLQCounts)
	}
	for _, q := range []struct {
		name      string
		want, got []broker.Delivery
	}{{"main", want.Main, got.Main}, {"dead-letter", want.DLQ, got.DLQ}} {
		if len(q.got) != len(q.want) {
			t.Fatalf("%s: %s queue holds %d messages, want %d", what, q.name, len(q.got), len(q.want))
		}
		for i := range q.want {
			if !reflect.DeepEqual(q.got[i], q.want[i]) {
				t.Fatalf("%s: %s queue message %d:\n got %+v\nwant %+v", what, q.name, q.want[i].Seq, q.got[i], q.want[i])
			}
		}
	}
}

func dirBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

package broker

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// TestCreateEntities: many entities made in one call share namespace
// commits, each works at once, those that forward to others of the call
// come after their targets whatever the order given, and all of it is
// there after a restart. A call that cannot make one stops there, naming
// it, and keeps what it made before.
func TestCreateEntities(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, Options{Dir: dir})
	const n = 2*maxCreateGroup + 10 // three namespace groups
	var specs []NewEntity
	// Forwarding chains given source first: c-i -> b-i -> a-i.
	for i := range 5 {
		specs = append(specs,
			NewEntity{Name: fmt.Sprintf("c-%d", i), Config: forwardTo(fmt.Sprintf("b-%d", i))},
			NewEntity{Name: fmt.Sprintf("b-%d", i), Config: deadLettersTo(fmt.Sprintf("a-%d", i))},
			NewEntity{Name: fmt.Sprintf("a-%d", i), Config: projection.DefaultConfig()})
	}
	specs = append(specs, NewEntity{Name: "events", Topic: true, Config: DefaultTopicConfig()})
	for i := len(specs); i < n; i++ {
		specs = append(specs, NewEntity{Name: fmt.Sprintf("q-%04d", i), Config: projection.DefaultConfig()})
	}
	nsBefore := b.ns.LastIndex()
	made, err := b.CreateEntities(specs)
	if err != nil {
		t.Fatal(err)
	}
	// A record each, and nothing else: no group was written twice.
	if got := b.ns.LastIndex() - nsBefore; got != n {
		t.Fatalf("%d namespace records for %d entities", got, n)
	}
	for i, e := range made {
		if e == nil || e.Name() != specs[i].Name || e.IsTopic() != specs[i].Topic {
			t.Fatalf("entity %d: %v, want %s", i, e, specs[i].Name)
		}
	}
	sendSync(t, made[0], projection.Message{Body: []byte("through two hops")})
	a0, _ := b.Entity("a-0")
	b0, _ := b.Entity("b-0")
	waitCounts(t, b0, event.MainQueue, func(c projection.Counts) bool { return c.Total == 1 })
	if c, _ := a0.Counts(event.MainQueue); c.Total != 0 {
		t.Fatalf("a-0 holds %+v: only dead letters go there", c)
	}

	// The first that cannot be made stops the call, and is named.
	_, err = b.CreateEntities([]NewEntity{
		{Name: "fresh-1", Config: projection.DefaultConfig()},
		{Name: "Q-0100", Config: projection.DefaultConfig()},
	})
	if !errors.Is(err, ErrEntityExists) || !strings.Contains(err.Error(), "Q-0100") {
		t.Fatalf("a name that exists: %v", err)
	}
	if _, err := b.Entity("fresh-1"); !errors.Is(err, ErrEntityNotFound) {
		t.Fatalf("fresh-1 made by a group that was refused: %v", err)
	}
	bad := projection.DefaultConfig()
	bad.MaxDeliveryCount = 0
	if _, err := b.CreateEntities([]NewEntity{{Name: "bad-one", Config: bad}}); !errors.Is(err, projection.ErrInvalid) ||
		!strings.Contains(err.Error(), "bad-one") {
		t.Fatalf("an invalid config: %v", err)
	}
	made, err = b.CreateEntities([]NewEntity{
		{Name: "first", Config: projection.DefaultConfig()},
		{Name: "loop-1", Config: forwardTo("loop-2")},
		{Name: "loop-2", Config: forwardTo("loop-1")},
	})
	if !errors.Is(err, ErrForwarding) || made[0] == nil || made[1] != nil || made[2] != nil {
		t.Fatalf("a forwarding cycle: %v, made %v", err, made)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = openBroker(t, Options{Dir: dir})
	defer b.Close()
	if got := len(b.Entities()); got != n+1 {
		t.Fatalf("%d entities after a restart, want %d", got, n+1)
	}
	b0, _ = b.Entity("b-0")
	if c, _ := b0.Counts(event.MainQueue); c.Total != 1 {
		t.Fatalf("b-0 after a restart: %+v", c)
	}
	if e, _ := b.Entity("events"); e == nil || !e.IsTopic() {
		t.Fatalf("events after a restart: %v", e)
	}
	// Each has its directories and no more: the refused ones left none.
	ents, err := os.ReadDir(layout.EntitiesDir(dir))
	if err != nil || len(ents) != n+1 {
		t.Fatalf("%d entity directories (%v), want %d", len(ents), err, n+1)
	}
}

// TestFinalSnapshotsOnlyWhereWorthIt: a graceful stop snapshots an entity
// with FinalSnapshotMin events or more since its last snapshot, and not
// one with fewer (thousands of queues created a moment ago stop at once);
// both come back whole.
func TestFinalSnapshotsOnlyWhereWorthIt(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, IdleCheckpoint: -1}
	b := openBroker(t, opts)
	few, err := b.CreateQueue("few", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	many, err := b.CreateQueue("many", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	sendSync(t, few, projection.Message{Body: []byte("one")})
	for range 20 {
		sendSync(t, many, projection.Message{Body: []byte("one of many")})
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b, rec, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, er := range rec.Entities {
		switch {
		case er.Name == "few" && (er.Snapshot != 0 || er.Replayed != 2):
			t.Errorf("few: snapshot %d, %d replayed; want none and its 2 events", er.Snapshot, er.Replayed)
		case er.Name == "many" && (er.Snapshot != 21 || er.Replayed != 0):
			t.Errorf("many: snapshot %d, %d replayed; want its 21 events in a snapshot", er.Snapshot, er.Replayed)
		}
	}
	for name, want := range map[string]uint64{"few": 1, "many": 20} {
		e, _ := b.Entity(name)
		if c, _ := e.Counts(event.MainQueue); c.Total != want {
			t.Errorf("%s holds %+v after the restart, want %d", name, c, want)
		}
	}
}

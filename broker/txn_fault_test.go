package broker

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// Random transactions (settling messages received and sending new ones)
// while writes and fsyncs of the queue's log fail at random: after the
// entity recovers, and again after a restart, each transaction happened
// whole or not at all, and whole if its commit was acknowledged.
func TestTransactionsUnderFailingWrites(t *testing.T) {
	const seeds, rounds = 120, 50
	dir := t.TempDir()
	var armed atomic.Value // "" or the op to fail once
	armed.Store("")
	opts := Options{Dir: dir, IdleCheckpoint: -1, Fault: func(entity, op string) error {
		if entity == "q" && op == armed.Load().(string) && armed.CompareAndSwap(op, "") {
			return fmt.Errorf("injected %s failure", op)
		}
		return nil
	}}
	b := openBroker(t, opts)
	e, err := b.CreateQueue("q", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for i := range seeds {
		sendSync(t, e, projection.Message{MessageID: fmt.Sprint("seed-", i), Body: []byte("seed")})
	}
	rng := rand.New(rand.NewPCG(41, 34))

	type txnRecord struct {
		seeds []string // settled (completed) by it
		sends []string // sent by it
		acked bool
	}
	var txns []txnRecord
	used := map[string]bool{} // seeds some transaction settled, committed or not

	var got chan Delivery
	var r *Receiver
	var limit uint64
	attach := func() {
		got = make(chan Delivery, 16)
		ch := got
		var err error
		r, err = e.Attach(ReceiverOptions{Name: "r", Deliver: func(d Delivery) { ch <- d }})
		if err != nil {
			t.Fatal(err)
		}
		limit = 0
	}
	attach()
	take := func() (Delivery, bool) {
		limit++
		r.SetLimit(limit)
		select {
		case d := <-got:
			return d, true
		case <-time.After(10 * time.Second):
			return Delivery{}, false
		}
	}
	for round := range rounds {
		var rec txnRecord
		var tx Transaction
		tx.ID = []byte(fmt.Sprint("tx-", round))
		for range 1 + rng.IntN(3) {
			d, ok := take()
			if !ok {
				t.Fatalf("round %d: no message to receive", round)
			}
			if used[d.MessageID] {
				continue // back after a failed commit: leave it, locked, to that one
			}
			used[d.MessageID] = true
			rec.seeds = append(rec.seeds, d.MessageID)
			tx.Settles = append(tx.Settles, TxSettle{Settlement: Settlement{Token: d.Token, Outcome: projection.Complete}})
		}
		var msgs []projection.Message
		for k := range 1 + rng.IntN(3) {
			id := fmt.Sprintf("tx-%d-%d", round, k)
			rec.sends = append(rec.sends, id)
			msgs = append(msgs, projection.Message{MessageID: id, Body: []byte("out")})
		}
		tx.Sends = []TxSend{{Messages: msgs}}
		if rng.IntN(4) == 0 {
			armed.Store([]string{"write", "sync"}[rng.IntN(2)])
		}
		err := commitSync(e, tx)
		rec.acked = err == nil
		armed.Store("")
		txns = append(txns, rec)
		if err != nil {
			// The entity recovers by reopening its log; receivers attach again.
			r.Detach(nil)
			for deadline := time.Now().Add(10 * time.Second); e.Sync() != nil; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("round %d: the entity did not recover: %v", round, e.Sync())
				}
			}
			attach()
		}
	}
	r.Detach(nil)

	check := func(when string, e *Entity) {
		t.Helper()
		ds, err := e.Peek(event.MainQueue, 1, 1000, "")
		if err != nil {
			t.Fatal(err)
		}
		present := map[string]bool{}
		for _, d := range ds {
			present[d.MessageID] = true
		}
		failed := 0
		for i, rec := range txns {
			sent := 0
			for _, id := range rec.sends {
				if present[id] {
					sent++
				}
			}
			gone := 0
			for _, id := range rec.seeds {
				if !present[id] {
					gone++
				}
			}
			happened := sent == len(rec.sends) && gone == len(rec.seeds)
			none := sent == 0 && gone == 0
			switch {
			case !happened && !none:
				t.Errorf("%s: transaction %d in part: %d of %d sends, %d of %d settlements", when, i, sent, len(rec.sends), gone, len(rec.seeds))
			case rec.acked && !happened:
				t.Errorf("%s: transaction %d was acknowledged and did not happen", when, i)
			case !rec.acked && happened:
				t.Errorf("%s: transaction %d was refused and happened", when, i)
			}
			if !rec.acked {
				failed++
			}
		}
		if failed == 0 || failed == len(txns) {
			t.Fatalf("%s: %d of %d commits failed: the test shows nothing", when, failed, len(txns))
		}
	}
	check("after recovering", e)
	b.shutdown(false)
	b = openBroker(t, Options{Dir: dir, IdleCheckpoint: -1})
	defer b.Close()
	e, _ = b.Entity("q")
	check("after a restart", e)
}

package broker

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/projection"
)

// A full disk: sends fail with an error that says so, nothing acknowledged
// is lost, and the entity comes back by itself once writes work again.
func TestDiskFullThenSpaceReturns(t *testing.T) {
	var full atomic.Bool
	b := openBroker(t, Options{Dir: t.TempDir(), Fault: func(entity, op string) error {
		if entity == "q" && full.Load() {
			return fmt.Errorf("%s: %w", op, syscall.ENOSPC)
		}
		return nil
	}})
	defer b.Close()
	e, err := b.CreateQueue("q", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	send := func(id string) error {
		ch := make(chan error, 1)
		e.Send(log.MainQueue, []projection.Message{{MessageID: id, Body: []byte(id)}}, func(err error) { ch <- err })
		return <-ch
	}
	for i := range 5 {
		if err := send(fmt.Sprint("before-", i)); err != nil {
			t.Fatal(err)
		}
	}
	full.Store(true)
	err = send("during")
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("send on a full disk: %v", err)
	}
	if err := send("during-2"); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("the failure is sticky until the entity is reopened: %v", err)
	}
	full.Store(false)
	deadline := time.Now().Add(20 * time.Second)
	for send("after") != nil {
		if time.Now().After(deadline) {
			t.Fatal("the entity did not come back when space returned")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ds, err := e.Peek(log.MainQueue, 1, 100, "")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range ds {
		ids = append(ids, d.MessageID)
	}
	if fmt.Sprint(ids) != "[before-0 before-1 before-2 before-3 before-4 after]" {
		t.Fatalf("after recovery the queue holds %v", ids)
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// clockAt asks walbus's test clock how far ahead it is, advancing it by
// advance first unless that is "".
func clockAt(t *testing.T, p *proc, advance string) (string, int) {
	t.Helper()
	url := "http://" + p.http + "/$test/clock"
	var resp *http.Response
	var err error
	if advance == "" {
		resp, err = http.Get(url)
	} else {
		resp, err = http.Post(url+"?advance="+advance, "application/json", nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]string
	json.NewDecoder(resp.Body).Decode(&body)
	return body["offset"], resp.StatusCode
}

// walbus serve --test-clock: a message scheduled a day ahead arrives after
// an advance of a day, one whose time to live ran out in the advance is
// gone, and a lock it passed is lost; the clock keeps its advance across a
// restart. Without the flag there is no test clock.
func TestTestClock(t *testing.T) {
	cfg := writeConfig(t, "orders", `"LockDuration": "PT1M"`)
	p := startWalbus(t, t.TempDir(), "--config", cfg, "--test-clock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := p.sdkClient()
	defer c.Close(ctx)
	s, err := c.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("tomorrow")}}, time.Now().Add(24*time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	ttl := time.Hour
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("short-lived"), TimeToLive: &ttl}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("locked")}, nil); err != nil {
		t.Fatal(err)
	}
	// Receive the one without a time to live (the other expires with the
	// advance) and hold its lock across it.
	var held *azservicebus.ReceivedMessage
	for held == nil {
		msgs, err := r.ReceiveMessages(ctx, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if string(m.Body) == "locked" {
				held = m
			} else if err := r.AbandonMessage(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
		}
	}

	if off, code := clockAt(t, p, "24h"); code != http.StatusOK || off != "24h0m0s" {
		t.Fatalf("advance: %d, offset %q", code, off)
	}
	var lockLost *azservicebus.Error
	if err := r.CompleteMessage(ctx, held, nil); !errors.As(err, &lockLost) || lockLost.Code != azservicebus.CodeLockLost {
		t.Fatalf("completing a lock the advance passed: %v", err)
	}
	var bodies []string
	deadline := time.Now().Add(20 * time.Second)
	for len(bodies) < 2 && time.Now().Before(deadline) {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		msgs, _ := r.ReceiveMessages(rctx, 5, nil)
		rcancel()
		for _, m := range msgs {
			bodies = append(bodies, string(m.Body))
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := strings.Join(bodies, ","); got != "locked,tomorrow" && got != "tomorrow,locked" {
		t.Fatalf("after an advance of a day: received %q, want the scheduled one and the one whose lock ran out; the short-lived one expired", got)
	}

	if code := p.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("stop: exit %d", code)
	}
	p.start()
	if off, code := clockAt(t, p, ""); code != http.StatusOK || off != "24h0m0s" {
		t.Fatalf("after a restart: %d, offset %q", code, off)
	}
	if _, code := clockAt(t, p, "nonsense"); code != http.StatusBadRequest {
		t.Fatalf("a bad advance: %d", code)
	}

	plain := startWalbus(t, t.TempDir())
	if _, code := clockAt(t, plain, "1h"); code != http.StatusNotFound {
		t.Fatalf("an advance without --test-clock: %d", code)
	}
}

// An advance also unlocks sessions whose lock it passed, closes
// duplicate-detection windows and deletes what it left idle for its
// AutoDeleteOnIdle, at once.
func TestTestClockSessionsWindowsIdle(t *testing.T) {
	p := startWalbus(t, t.TempDir(), "--test-clock")
	walbus := managing(t, p)
	walbus(0, "queue", "create", "tasks", "--sessions", "--lock-duration", "1m")
	walbus(0, "queue", "create", "dups", "--duplicate-detection", "--duplicate-window", "10m")
	walbus(0, "queue", "create", "idle", "--auto-delete-on-idle", "10m")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := p.sdkClient()
	defer c.Close(ctx)
	send := func(queue string, m *azservicebus.Message) {
		t.Helper()
		s, err := c.NewSender(queue, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		if err := s.SendMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	dups := func() int {
		t.Helper()
		r, err := c.NewReceiverForQueue("dups", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(ctx)
		return len(peekSeqs(t, ctx, r))
	}
	send("dups", &azservicebus.Message{MessageID: to.Ptr("once"), Body: []byte("1")})
	send("dups", &azservicebus.Message{MessageID: to.Ptr("once"), Body: []byte("2")})
	if n := dups(); n != 1 {
		t.Fatalf("a duplicate within the window: %d messages", n)
	}
	session := "s"
	send("tasks", &azservicebus.Message{SessionID: &session, Body: []byte("t")})
	held, err := c.AcceptSessionForQueue(ctx, "tasks", session, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close(ctx)
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	_, err = c.AcceptSessionForQueue(short, "tasks", session, nil)
	stop()
	if err == nil {
		t.Fatal("a session held by another receiver was accepted")
	}

	if off, code := clockAt(t, p, "11m"); code != http.StatusOK || off != "11m0s" {
		t.Fatalf("advance: %d, offset %q", code, off)
	}
	again, err := c.AcceptSessionForQueue(ctx, "tasks", session, nil)
	if err != nil {
		t.Fatalf("a session whose lock the advance passed: %v", err)
	}
	defer again.Close(ctx)
	send("dups", &azservicebus.Message{MessageID: to.Ptr("once"), Body: []byte("3")})
	if n := dups(); n != 2 {
		t.Fatalf("the same MessageId after the window closed: %d messages, want 2", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, errOut := runWalbus(t, nil, "queue", "get", "idle", "--server=http://"+p.http)
		if code == 1 && strings.Contains(errOut, "no queue idle") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a queue idle past its AutoDeleteOnIdle after the advance is still there")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

package transport

import (
	"testing"
	"time"
)

// Stats counts open connections, sessions and attached links, and comes
// back to zero when everything is closed, however it closed.
func TestStatsFollowWhatIsOpen(t *testing.T) {
	h := newTestHandler()
	ts := startServer(t, Config{}, h)
	waitStats := func(want Stats) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for ts.srv.Stats() != want && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if got := ts.srv.Stats(); got != want {
			t.Fatalf("stats %+v, want %+v", got, want)
		}
	}
	c := ts.dial(t, nil)
	s1 := newSession(t, c)
	s2 := newSession(t, c)
	snd, err := s1.NewSender(testCtx(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.NewReceiver(testCtx(t), "q", nil); err != nil {
		t.Fatal(err)
	}
	waitStats(Stats{Connections: 1, Sessions: 2, Links: 2})
	snd.Close(testCtx(t))
	waitStats(Stats{Connections: 1, Sessions: 2, Links: 1})
	s1.Close(testCtx(t))
	waitStats(Stats{Connections: 1, Sessions: 1, Links: 1})
	c.Close() // the receiver and its session go with the connection
	waitStats(Stats{})
}

package main

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
)

// stuckConn is a client socket that stops reading once stuck is set: a
// client that never answers the server's close.
type stuckConn struct {
	net.Conn
	stuck   atomic.Bool
	release chan struct{}
}

func (c *stuckConn) Read(b []byte) (int, error) {
	if c.stuck.Load() {
		<-c.release
	}
	n, err := c.Conn.Read(b)
	if c.stuck.Load() {
		// A read already waiting when stuck was set: what it got (the
		// server's close) must not reach the client either.
		<-c.release
	}
	return n, err
}

// A client that never answers keeps a graceful shutdown waiting; a second
// SIGTERM ends the process at once, and the next start recovers.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	dir := t.TempDir()
	p := startWalbus(t, dir, "--shutdown-timeout", "5m")
	nc, err := net.Dial("tcp", p.amqp)
	if err != nil {
		t.Fatal(err)
	}
	sc := &stuckConn{Conn: nc, release: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := amqp.NewConn(ctx, sc, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain("RootManageSharedAccessKey", "SAS_KEY_VALUE")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(sc.release)
		nc.Close()
		conn.Close()
	}()
	sc.stuck.Store(true)

	p.cmd.Process.Signal(syscall.SIGTERM)
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(p.logs(), "shutting down"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no shutdown after SIGTERM:\n%s", p.logs())
		}
	}
	select {
	case <-p.exited:
		t.Fatalf("exited (%d) although a client never answered the close:\n%s", p.exitCode, p.logs())
	case <-time.After(300 * time.Millisecond):
	}
	if code := p.signal(syscall.SIGTERM); code != 1 || !strings.Contains(p.logs(), "second signal") {
		t.Fatalf("exit %d after the second signal:\n%s", code, p.logs())
	}
	p.start() // the directory is usable: the log is the truth
}

// The emulator's default key on an address others can reach is worth a
// warning; on loopback it is not.
func TestDefaultKeyWarningOffLoopback(t *testing.T) {
	for _, c := range []struct {
		addr string
		warn bool
	}{{"127.0.0.1:0", false}, {"0.0.0.0:0", true}} {
		p := startWalbus(t, t.TempDir(), "--amqp", c.addr)
		if got := strings.Contains(p.logs(), "default key is accepted on a non-loopback address"); got != c.warn {
			t.Fatalf("--amqp %s: warning %v, want %v:\n%s", c.addr, got, c.warn, p.logs())
		}
		p.kill()
	}
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "[::1]:1": true, "localhost:1": true,
		"0.0.0.0:1": false, "[::]:1": false, "10.1.2.3:1": false, ":5672": false} {
		if isLoopback(addr) != want {
			t.Errorf("isLoopback(%s) = %v", addr, !want)
		}
	}
}

package transport

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// admissionRig accepts on a loopback listener through an Admission and
// keeps what it admitted.
type admissionRig struct {
	t    *testing.T
	ln   net.Listener
	adm  *Admission
	logs *syncBuffer

	mu       sync.Mutex
	admitted []net.Conn
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newAdmissionRig(t *testing.T, limits AdmissionLimits) *admissionRig {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	limits.Flags = [...]string{"--max-pending-connections", "--max-pending-per-address", "--max-connections-per-address"}
	r := &admissionRig{t: t, ln: ln, logs: &syncBuffer{}}
	r.adm = NewAdmission(limits, slog.New(slog.NewTextHandler(r.logs, nil)))
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			if c, ok := r.adm.Admit(nc); ok {
				r.mu.Lock()
				r.admitted = append(r.admitted, c)
				r.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.admitted {
			c.Close()
		}
	})
	return r
}

// dial connects from source address from and reports whether the server
// kept the connection: it waits until the rig has admitted one more or the
// admission has refused one more.
func (r *admissionRig) dial(from string) (net.Conn, bool) {
	r.t.Helper()
	admitted, refused := len(r.conns()), r.refusedSoFar()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", r.ln.Addr().String())
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		switch {
		case len(r.conns()) > admitted:
			return c, true
		case r.refusedSoFar() > refused:
			return c, false
		case time.Now().After(deadline):
			r.t.Fatal("the connection was neither admitted nor refused")
		}
		time.Sleep(time.Millisecond)
	}
}

func (r *admissionRig) refusedSoFar() uint64 {
	var n uint64
	for _, v := range r.adm.Stats().Refused {
		n += v
	}
	return n
}

func (r *admissionRig) conns() []net.Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]net.Conn(nil), r.admitted...)
}

// Pending connections are capped per source address and in all; an
// authorized connection leaves the pending count, and a closed one gives
// its place back. Each refusal is counted under its limit and warned of.
func TestAdmissionLimits(t *testing.T) {
	r := newAdmissionRig(t, AdmissionLimits{MaxPending: 5, MaxPendingPerAddress: 3, MaxPerAddress: 4})
	for i := range 3 {
		if _, kept := r.dial("127.0.0.2"); !kept {
			t.Fatalf("connection %d from .2 refused", i)
		}
	}
	if _, kept := r.dial("127.0.0.2"); kept {
		t.Fatal("a fourth pending connection from .2 was kept")
	}
	// Another address still gets in, up to the pending limit of all.
	for i := range 2 {
		if _, kept := r.dial("127.0.0.3"); !kept {
			t.Fatalf("connection %d from .3 refused", i)
		}
	}
	if _, kept := r.dial("127.0.0.4"); kept {
		t.Fatal("a sixth pending connection was kept")
	}
	// Authorizing one from .2 frees a pending place for .2 (three pending
	// there again at most), but .2 now has four connections: its limit.
	conns := r.conns()
	Authorized(&peekedConn{Conn: conns[0]})
	if st := r.adm.Stats(); st.Pending != 4 {
		t.Fatalf("pending %d after one authorized, want 4", st.Pending)
	}
	if _, kept := r.dial("127.0.0.2"); !kept {
		t.Fatal("after an authorization .2 was refused")
	}
	if _, kept := r.dial("127.0.0.2"); kept {
		t.Fatal(".2 has four connections but a fifth was kept")
	}
	conns[1].Close() // a pending one from .2
	if _, kept := r.dial("127.0.0.2"); !kept {
		t.Fatal("after a close .2 was refused")
	}
	st := r.adm.Stats()
	if st.Refused[LimitPendingPerAddress] != 1 || st.Refused[LimitPending] != 1 || st.Refused[LimitPerAddress] != 1 {
		t.Fatalf("refusals %v", st.Refused)
	}
	logs := r.logs.String()
	for _, flag := range []string{"--max-pending-connections", "--max-pending-per-address", "--max-connections-per-address"} {
		if strings.Count(logs, "limit="+flag) != 1 {
			t.Errorf("warnings of %s: %q", flag, logs)
		}
	}
}

// A limit refusing again and again warns once per WarnEvery, and counts
// every refusal.
func TestAdmissionWarnsOnce(t *testing.T) {
	r := newAdmissionRig(t, AdmissionLimits{MaxPendingPerAddress: 1})
	r.dial("127.0.0.2")
	for range 20 {
		if _, kept := r.dial("127.0.0.2"); kept {
			t.Fatal("kept over the limit")
		}
	}
	if n := strings.Count(r.logs.String(), "connection refused"); n != 1 {
		t.Fatalf("%d warnings for 20 refusals:\n%s", n, r.logs)
	}
	if got := r.adm.Stats().Refused[LimitPendingPerAddress]; got != 20 {
		t.Fatalf("counted %d refusals", got)
	}
}

// A connection still pending when the handshake timeout runs out is
// closed and counted; an authorized one stays.
func TestAdmissionHandshakeTimeout(t *testing.T) {
	r := newAdmissionRig(t, AdmissionLimits{HandshakeTimeout: 2 * time.Second})
	dial := func() net.Conn {
		c, err := net.Dial("tcp", r.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	idle, good := dial(), dial()
	for len(r.conns()) < 2 {
		time.Sleep(time.Millisecond)
	}
	for _, c := range r.conns() {
		if c.RemoteAddr().String() == good.LocalAddr().String() {
			Authorized(c)
		}
	}
	idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the idle connection: %v, want EOF", err)
	}
	good.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := good.Read(make([]byte, 1)); err == io.EOF {
		t.Fatal("the authorized connection was closed")
	}
	if st := r.adm.Stats(); st.TimedOut != 1 || st.Pending != 0 {
		t.Fatalf("stats %+v", st)
	}
}

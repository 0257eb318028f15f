package transport

import (
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
	"github.com/walbus/walbus/amqpserver/frames"
)

func TestSASLAnonymous(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	ts.dial(t, nil)
	c := <-ts.h.conns
	if got := c.Identity(); got != MechanismAnonymous {
		t.Fatalf("identity %v", got)
	}
	ts.h.mu.Lock()
	cred := ts.h.creds[0]
	ts.h.mu.Unlock()
	// go-amqp's trace string, passed through untouched.
	if cred.Mechanism != MechanismAnonymous || string(cred.Response) != "anonymous" {
		t.Fatalf("credentials %+v", cred)
	}
}

func plainHandler() *testHandler {
	h := newTestHandler()
	h.authenticate = func(_ ConnInfo, cred Credentials) (any, error) {
		if cred.Mechanism == MechanismPlain && cred.Username == "user" && cred.Password == "secret" {
			return "user", nil
		}
		return nil, errors.New("bad credentials")
	}
	return h
}

func TestSASLPlain(t *testing.T) {
	ts := startServer(t, Config{}, plainHandler())
	ts.dial(t, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain("user", "secret")})
	if c := <-ts.h.conns; c.Identity() != "user" {
		t.Fatalf("identity %v", c.Identity())
	}
}

func TestSASLPlainBadCredentials(t *testing.T) {
	ts := startServer(t, Config{}, plainHandler())
	_, err := amqp.Dial(testCtx(t), "amqp://"+ts.addr, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain("user", "wrong")})
	if err == nil {
		t.Fatal("dial with a wrong password succeeded")
	}
	// The outcome itself, seen raw: code auth (1), then the socket closes.
	r := dialRaw(t, ts.addr)
	r.header(frames.ProtocolSASL)
	r.readHeader()
	expect[*frames.SASLMechanisms](r)
	r.sendSASL(&frames.SASLInit{Mechanism: "PLAIN", InitialResponse: []byte("\x00user\x00wrong")})
	if o := expect[*frames.SASLOutcome](r); o.Code != frames.SASLAuth {
		t.Fatalf("outcome code %d, want auth", o.Code)
	}
	r.expectEOF()
}

func TestSASLMechanismsAndShapes(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	r := dialRaw(t, ts.addr)
	r.header(frames.ProtocolSASL)
	r.readHeader()
	m := expect[*frames.SASLMechanisms](r)
	if len(m.Mechanisms) != 3 || m.Mechanisms[0] != "ANONYMOUS" {
		t.Fatalf("mechanisms %v", m.Mechanisms)
	}

	cases := []struct {
		name string
		init frames.SASLInit
		code frames.SASLCode
	}{
		{"rhea anonymous", frames.SASLInit{Mechanism: "ANONYMOUS", InitialResponse: []byte("\x00RootManageSharedAccessKey")}, frames.SASLOK},
		{"mssbcbs", frames.SASLInit{Mechanism: "MSSBCBS"}, frames.SASLOK},
		{"plain with authzid", frames.SASLInit{Mechanism: "PLAIN", InitialResponse: []byte("admin\x00user\x00pw")}, frames.SASLOK},
		{"plain without separator", frames.SASLInit{Mechanism: "PLAIN", InitialResponse: []byte("userpw")}, frames.SASLAuth},
		{"plain empty password", frames.SASLInit{Mechanism: "PLAIN", InitialResponse: []byte("\x00user\x00")}, frames.SASLAuth},
		{"plain field over 255", frames.SASLInit{Mechanism: "PLAIN", InitialResponse: []byte("\x00" + strings.Repeat("u", 256) + "\x00pw")}, frames.SASLAuth},
		{"unoffered mechanism", frames.SASLInit{Mechanism: "EXTERNAL"}, frames.SASLAuth},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, ts.addr)
			r.header(frames.ProtocolSASL)
			r.readHeader()
			expect[*frames.SASLMechanisms](r)
			r.sendSASL(&tc.init)
			if o := expect[*frames.SASLOutcome](r); o.Code != tc.code {
				t.Fatalf("outcome %d, want %d", o.Code, tc.code)
			}
			if tc.code != frames.SASLOK {
				r.expectEOF()
				return
			}
			r.header(frames.ProtocolAMQP)
			if h := r.readHeader(); h.ID != frames.ProtocolAMQP {
				t.Fatalf("header %+v", h)
			}
		})
	}
}

func TestNoSASLAllowed(t *testing.T) {
	ts := startServer(t, Config{AllowNoSASL: true}, nil)
	// go-amqp without a SASLType sends the plain AMQP header.
	c := ts.dial(t, &amqp.ConnOptions{})
	s := newSession(t, c)
	snd, err := s.NewSender(testCtx(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(testCtx(t), amqp.NewMessage([]byte("x")), nil); err != nil {
		t.Fatal(err)
	}
	if id := (<-ts.h.conns).Identity(); id != nil {
		t.Fatalf("identity without SASL: %v", id)
	}
}

func TestNoSASLRefused(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	if _, err := amqp.Dial(testCtx(t), "amqp://"+ts.addr, &amqp.ConnOptions{}); err == nil {
		t.Fatal("dial without SASL succeeded")
	}
	// §2.2: the server answers with the header it wants, then closes.
	r := dialRaw(t, ts.addr)
	r.header(frames.ProtocolAMQP)
	if h := r.readHeader(); h.ID != frames.ProtocolSASL {
		t.Fatalf("answered %+v, want the SASL header", h)
	}
	r.expectEOF()
}

func TestUnsupportedProtocolHeaders(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	for _, hdr := range [][]byte{
		[]byte("GET / HTTP/1.1\r\n\r\n"),
		{'A', 'M', 'Q', 'P', 0, 0, 9, 1}, // AMQP 0-9-1
		{'A', 'M', 'Q', 'P', 2, 1, 0, 0}, // TLS by header
		{'A', 'M', 'Q', 'P', 3, 1, 1, 0}, // SASL, version 1.1.0
	} {
		r := dialRaw(t, ts.addr)
		r.write(hdr)
		if h := r.readHeader(); !h.Supported() || h.ID != frames.ProtocolSASL {
			t.Fatalf("%q answered with %+v", hdr, h)
		}
		r.expectEOF()
	}
}

func TestHandshakeTimeout(t *testing.T) {
	ts := startServer(t, Config{HandshakeTimeout: 100 * time.Millisecond}, nil)
	r := dialRaw(t, ts.addr)
	r.write([]byte{'A', 'M', 'Q', 'P', 3, 1, 0, 0, 0, 0}) // then a frame that never completes
	r.readHeader()
	expect[*frames.SASLMechanisms](r)
	r.expectEOF()
}

func TestSASLAfterSASLMustBeAMQP(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	r := dialRaw(t, ts.addr)
	r.saslAnonymous()
	r.header(frames.ProtocolSASL)
	if h := r.readHeader(); h.ID != frames.ProtocolAMQP {
		t.Fatalf("answered %+v, want AMQP", h)
	}
	r.expectEOF()
}

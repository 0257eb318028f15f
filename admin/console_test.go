package admin

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/walbus/walbus/amqpserver"
	"github.com/walbus/walbus/broker"
)

// Only the console's requests from a loopback address to a loopback host
// go without a key.
func TestLoopbackConsole(t *testing.T) {
	for _, c := range []struct {
		remote, host string
		header       bool
		want         bool
	}{
		{"127.0.0.1:5000", "127.0.0.1:5300", true, true},
		{"[::1]:5000", "[::1]:5300", true, true},
		{"127.0.0.1:5000", "localhost:5300", true, true},
		{"127.0.0.1:5000", "LOCALHOST", true, true},
		{"127.0.0.1:5000", "127.0.0.1:5300", false, false},      // not the console
		{"192.0.2.7:5000", "127.0.0.1:5300", true, false},       // from elsewhere
		{"10.1.2.3:5000", "localhost:5300", true, false},        // from elsewhere
		{"127.0.0.1:5000", "rebound.example:5300", true, false}, // DNS rebinding
		{"127.0.0.1:5000", "192.0.2.7:5300", true, false},
		{"not an address", "127.0.0.1", true, false},
	} {
		r := httptest.NewRequest("GET", "/$walbus/overview", nil)
		r.RemoteAddr, r.Host = c.remote, c.host
		if c.header {
			r.Header.Set(consoleHeader, "1")
		}
		if got := loopbackConsole(r); got != c.want {
			t.Errorf("from %s to %s (header %v): %v, want %v", c.remote, c.host, c.header, got, c.want)
		}
	}
}

// sendSeeds are requests the console sends.
var sendSeeds = []string{
	`{"body": "hello"}`,
	`{"body": "{\"a\": 1}", "contentType": "application/json", "messageId": "m", "correlationId": "c", "subject": "s",
	  "to": "t", "replyTo": "r", "sessionId": "", "timeToLive": "PT1H", "scheduledEnqueueTime": "2030-01-01T00:00:00Z",
	  "applicationProperties": {"n": 1, "f": 1.5, "b": true, "s": "x"}}`,
	`{"body": "AAEC/w==", "bodyEncoding": "base64", "timeToLive": "90s"}`,
}

// A request the console sends encodes as a message that the server reads
// back (Inbound) and the browser shows (viewOf) with the same body and
// properties; a bad request is an error, never a panic.
func FuzzSendRequest(f *testing.F) {
	for _, s := range sendSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req sendRequest
		if json.Unmarshal(data, &req) != nil {
			return
		}
		raw, err := req.encode(time.Unix(0, 0))
		if err != nil {
			return
		}
		m, err := amqpserver.Inbound(raw)
		if err != nil {
			t.Fatalf("an encoded request does not read back: %v", err)
		}
		if req.MessageID != "" && m.MessageID != req.MessageID {
			t.Fatalf("message id %q, want %q", m.MessageID, req.MessageID)
		}
		v, err := viewOf(&broker.Delivery{Seq: 1, Message: m.Body, MessageID: m.MessageID, SessionID: m.SessionID})
		if err != nil {
			t.Fatalf("an encoded request does not show: %v", err)
		}
		want := []byte(req.Body)
		if req.BodyEncoding == "base64" {
			want = nil // decoded in encode, checked by the seed below
		}
		if want != nil && !bytes.Equal(v.Body, want) {
			t.Fatalf("body %q, want %q", v.Body, want)
		}
		if len(v.ApplicationProps) != len(req.Properties) {
			t.Fatalf("%d application properties, want %d", len(v.ApplicationProps), len(req.Properties))
		}
	})
}

// The seeds show as sent: the base64 body decoded, the properties typed.
func TestSendRequestShows(t *testing.T) {
	var req sendRequest
	if err := json.Unmarshal([]byte(sendSeeds[2]), &req); err != nil {
		t.Fatal(err)
	}
	raw, err := req.encode(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	m, err := amqpserver.Inbound(raw)
	if err != nil {
		t.Fatal(err)
	}
	if m.TTL != 90*time.Second {
		t.Fatalf("ttl %v", m.TTL)
	}
	v, err := viewOf(&broker.Delivery{Seq: 1, Message: m.Body})
	if err != nil || !bytes.Equal(v.Body, []byte{0, 1, 2, 0xff}) {
		t.Fatalf("body %v %v", v.Body, err)
	}
	req = sendRequest{}
	if err := json.Unmarshal([]byte(sendSeeds[1]), &req); err != nil {
		t.Fatal(err)
	}
	if raw, err = req.encode(time.Now()); err != nil {
		t.Fatal(err)
	}
	if m, err = amqpserver.Inbound(raw); err != nil {
		t.Fatal(err)
	}
	if m.ScheduledAt != time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() || m.SessionID == "" {
		t.Fatalf("scheduled at %d, session %q", m.ScheduledAt, m.SessionID)
	}
	v, err = viewOf(&broker.Delivery{Seq: 1, Message: m.Body})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(v.ApplicationProps)
	if string(out) != `{"b":true,"f":1.5,"n":1,"s":"x"}` || v.Properties["subject"] != "s" || v.Properties["groupId"] != "" {
		t.Fatalf("shown as %s, %v", out, v.Properties)
	}
}

// Whatever bytes a stored message holds, the browser shows it or says
// why not.
func FuzzMessageView(f *testing.F) {
	for _, s := range sendSeeds {
		var req sendRequest
		json.Unmarshal([]byte(s), &req)
		raw, _ := req.encode(time.Unix(0, 0))
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := viewOf(&broker.Delivery{Seq: 1, Message: raw})
		if err == nil {
			if _, err := json.Marshal(v); err != nil {
				t.Fatalf("a view JSON cannot write: %v", err)
			}
		}
	})
}

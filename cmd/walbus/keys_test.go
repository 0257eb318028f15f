package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
)

// Keys from --key and --keys carry their rights, and --no-default-key
// refuses the emulator's key.
func TestKeysFromFlagsAndFile(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(keys, []byte(`[{"name": "reader", "key": "r3ad", "rights": "Listen"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, "q", "")
	p := startWalbus(t, t.TempDir(), "--config", cfg, "--no-default-key", "--key", "writer=wr1te:Send", "--keys", keys)

	dial := func(name, key string) (*amqp.Session, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := amqp.Dial(ctx, "amqp://"+p.amqp, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain(name, key)})
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { conn.Close() })
		return conn.NewSession(ctx, nil)
	}
	unauthorized := func(err error) bool {
		var le *amqp.LinkError
		if errors.As(err, &le) && le.RemoteErr != nil {
			err = le.RemoteErr
		}
		var ae *amqp.Error
		return errors.As(err, &ae) && ae.Condition == "amqp:unauthorized-access"
	}
	ctx := context.Background()

	if _, err := dial("RootManageSharedAccessKey", "SAS_KEY_VALUE"); err == nil {
		t.Fatal("the default key was accepted with --no-default-key")
	}
	if _, err := dial("writer", "wrong"); err == nil {
		t.Fatal("a wrong key was accepted")
	}

	w, err := dial("writer", "wr1te")
	if err != nil {
		t.Fatal(err)
	}
	snd, err := w.NewSender(ctx, "q", nil)
	if err != nil {
		t.Fatalf("writer (Send) cannot attach a sender: %v", err)
	}
	if err := snd.Send(ctx, amqp.NewMessage([]byte("hello")), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := w.NewReceiver(ctx, "q", nil); !unauthorized(err) {
		t.Fatalf("writer (Send only) attached a receiver: %v", err)
	}

	r, err := dial("reader", "r3ad")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.NewSender(ctx, "q", nil); !unauthorized(err) {
		t.Fatalf("reader (Listen only) attached a sender: %v", err)
	}
	rcv, err := r.NewReceiver(ctx, "q", &amqp.ReceiverOptions{Credit: 1})
	if err != nil {
		t.Fatalf("reader (Listen) cannot attach a receiver: %v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := rcv.Receive(rctx, nil)
	if err != nil || string(m.GetData()) != "hello" {
		t.Fatalf("reader received %v, %v", m, err)
	}
	if err := rcv.AcceptMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// --session-wait bounds the wait of a receiver for the next available
// session whose client names no com.microsoft:timeout (the Python SDK's):
// with 200ms it is refused with com.microsoft:timeout well inside the
// test's 20 s, where the default would wait a minute.
func TestSessionWaitFlag(t *testing.T) {
	cfg := writeConfig(t, "sq", `"RequiresSession": true`)
	p := startWalbus(t, t.TempDir(), "--config", cfg, "--session-wait", "200ms")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := amqp.Dial(ctx, "amqp://"+p.amqp, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain("RootManageSharedAccessKey", "SAS_KEY_VALUE")})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	second := amqp.ReceiverSettleModeSecond
	_, err = s.NewReceiver(ctx, "sq", &amqp.ReceiverOptions{
		SettlementMode: &second,
		// A session filter with a null value: the next available session.
		Filters: []amqp.LinkFilter{amqp.NewLinkFilter("com.microsoft:session-filter", 0x00000137_0000000C, nil)},
	})
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Condition != "com.microsoft:timeout" {
		t.Fatalf("attach for the next session: %v, want a com.microsoft:timeout detach", err)
	}
}

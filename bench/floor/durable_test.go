package floor

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// framed is what the syncer writes for recs: each behind its length.
func framed(recs ...[]byte) []byte {
	var b []byte
	for _, r := range recs {
		b = binary.BigEndian.AppendUint32(b, uint32(len(r)))
		b = append(b, r...)
	}
	return b
}

// addAndWait adds rec and waits until it is durable.
func addAndWait(t *testing.T, w *syncer, rec []byte) {
	t.Helper()
	done := make(chan struct{})
	w.add(rec, func() { close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a record never became durable")
	}
}

// An overwriting floor keeps its file at the ring's size and writes round
// it: the file holds the newest bytes where they wrapped.
func TestOverwriteWrapsRoundTheFile(t *testing.T) {
	const size = 100
	path := filepath.Join(t.TempDir(), "ring")
	w, err := openSyncer(path, true, size)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	at := 0
	for i := range 9 {
		rec := bytes.Repeat([]byte{byte('a' + i)}, 20)
		addAndWait(t, w, rec)
		for _, c := range framed(rec) {
			want[at] = c
			at = (at + 1) % size
		}
	}
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("file is\n%q\nwant\n%q", got, want)
	}
}

// An appending floor starts its file again from empty when a write would
// take it past its limit.
func TestAppendStartsAgainAtTheLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	w, err := openSyncer(path, false, 60)
	if err != nil {
		t.Fatal(err)
	}
	recs := [][]byte{[]byte("first record, 24 bytes.."), []byte("second record, 25 bytes.."), []byte("third")}
	for _, r := range recs {
		addAndWait(t, w, r)
	}
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// 28 + 29 bytes fit in 60; the third's 9 do not, so the file starts
	// again with it.
	if want := framed(recs[2]); !bytes.Equal(got, want) {
		t.Fatalf("file is %q, want %q", got, want)
	}
}

// When its file fails, a durable floor answers neither sends nor
// settlements, delivers nothing it was sent, and stops serving with the
// file's error.
func TestFailedSyncAnswersNothing(t *testing.T) {
	srv, err := NewDurable(filepath.Join(t.TempDir(), "floor.log"), Append)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := azservicebus.NewClientFromConnectionString(
		"Endpoint=sb://"+ln.Addr().String()+";SharedAccessKeyName=any;SharedAccessKey=any;UseDevelopmentEmulator=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	s, err := c.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("durable")}, nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %d messages, %v", len(msgs), err)
	}

	srv.log.f.Close() // every write from now on fails

	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	err = r.CompleteMessage(short, msgs[0], nil)
	cancelShort()
	if err == nil {
		t.Fatal("a complete was answered though its record never reached the disk")
	}
	select {
	case err := <-served:
		if !errors.Is(err, os.ErrClosed) {
			t.Fatalf("Serve returned %v, want the file's error", err)
		}
	case <-ctx.Done():
		t.Fatal("Serve went on after its file failed")
	}
	short, cancelShort = context.WithTimeout(ctx, 2*time.Second)
	err = s.SendMessage(short, &azservicebus.Message{Body: []byte("lost")}, nil)
	cancelShort()
	if err == nil {
		t.Fatal("a send was accepted though its record never reached the disk")
	}
	short, cancelShort = context.WithTimeout(ctx, time.Second)
	more, _ := r.ReceiveMessages(short, 1, nil)
	cancelShort()
	if len(more) != 0 {
		t.Fatalf("received %q, which was never durable", more[0].Body)
	}
	if err := srv.Close(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Close returned %v, want the file's error", err)
	}
}

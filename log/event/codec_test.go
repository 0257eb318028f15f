package event

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"
)

// sampleEvents returns one fully populated event of every type.
func sampleEvents() []Event {
	var evs []Event
	for i, t := range Types() {
		e := Event{Type: t, Index: uint64(100 + i), Time: 1_700_000_000_000_000_000 + int64(i)}
		for _, f := range layouts[t] {
			switch f {
			case fQueue:
				e.Queue = 1
			case fSeq:
				e.Seq = 42
			case fToken:
				e.Token = LockToken{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
			case fUntil:
				e.Until = -5 // negative times must survive the varint
			case fTTL:
				e.TTL = 3_600_000_000_000
			case fMessageID:
				e.MessageID = "msg-1"
			case fSessionID:
				e.SessionID = "session-é"
			case fReceiver:
				e.Receiver = "link-7"
			case fReason:
				e.Reason = "MaxDeliveryCountExceeded"
			case fDescription:
				e.Description = "too many"
			case fName:
				e.Name = "orders/eu"
			case fProps:
				e.Props = []byte{0xc1, 0x01, 0x00}
			case fMessage:
				e.Message = bytes.Repeat([]byte{0x53}, 300)
			case fState:
				e.State = []byte("state")
			case fDeliveries:
				e.Deliveries = 70000 // beyond 16 bits: the log keeps it whole
			}
		}
		if _, ok := tails[t]; ok {
			e.Hops = 3
		}
		evs = append(evs, e)
	}
	return evs
}

func TestRecordRoundTripEveryType(t *testing.T) {
	for _, e := range sampleEvents() {
		rec := AppendRecord(nil, &e)
		if len(rec) != RecordSize(&e) {
			t.Errorf("%s: RecordSize %d, encoded %d", e.Type, RecordSize(&e), len(rec))
		}
		got, err := DecodeRecord(rec)
		if err != nil {
			t.Fatalf("%s: %v", e.Type, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("%s: round trip\n got %+v\nwant %+v", e.Type, got, e)
		}
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	e := sampleEvents()[0]
	good := AppendRecord(nil, &e)
	cases := map[string][]byte{
		"empty":       {},
		"short":       good[:MinRecordSize-1],
		"zero-filled": make([]byte, len(good)),
		"bad version": append([]byte{3}, good[1:]...),
		"truncated":   good[:len(good)-1],
	}
	unknown := Event{Type: 200, Index: 1}
	cases["unknown type"] = AppendRecord(nil, &unknown)
	zeroIndex := Event{Type: Completed}
	cases["index zero"] = AppendRecord(nil, &zeroIndex)
	withTrailer := AppendRecord(nil, &Event{Type: Completed, Index: 1, Seq: 1})
	withTrailer = append(withTrailer[:len(withTrailer)-4], 0) // extra payload byte, stale CRC
	cases["trailing byte"] = withTrailer
	for name, b := range cases {
		if _, err := DecodeRecord(b); !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("%s: err = %v, want ErrInvalidRecord", name, err)
		}
	}
	// Every single-bit flip anywhere in the record is caught.
	for i := range good {
		for bit := 0; bit < 8; bit++ {
			b := bytes.Clone(good)
			b[i] ^= 1 << bit
			if _, err := DecodeRecord(b); err == nil {
				t.Fatalf("flip of byte %d bit %d not detected", i, bit)
			}
		}
	}
}

// A message's hop count is an optional tail: a record without it (every
// record written before it existed) reads as zero hops, a record with it
// is longer by exactly the count, and a tail that says zero is refused, so
// that each event has one encoding.
func TestHopsTail(t *testing.T) {
	e := Event{Type: Forwarded, Index: 7, Time: 1, Queue: 0, MessageID: "m", Name: "src", Source: 2, Seq: 9,
		Message: []byte("body")}
	without := AppendRecord(nil, &e)
	if got, err := DecodeRecord(without); err != nil || got.Hops != 0 {
		t.Fatalf("a record without hops: %d hops, %v", got.Hops, err)
	}
	e.Hops = 4
	with := AppendRecord(nil, &e)
	if len(with) != len(without)+1 || RecordSize(&e) != len(with) {
		t.Fatalf("with hops %d bytes (RecordSize %d), without %d", len(with), RecordSize(&e), len(without))
	}
	if got, err := DecodeRecord(with); err != nil || got.Hops != 4 {
		t.Fatalf("a record with 4 hops reads %d, %v", got.Hops, err)
	}
	// The same record with its tail rewritten to zero (and a good CRC).
	zero := bytes.Clone(with[:len(with)-crcSize])
	zero[len(zero)-1] = 0
	zero = binary.BigEndian.AppendUint32(zero, crc32.Checksum(zero, castagnoli))
	if _, err := DecodeRecord(zero); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("a zero tail: %v, want ErrInvalidRecord", err)
	}
	// Types without a tail ignore Hops.
	c := Event{Type: Completed, Index: 1, Seq: 1, Hops: 2}
	if got, err := DecodeRecord(AppendRecord(nil, &c)); err != nil || got.Hops != 0 || RecordSize(&c) != len(AppendRecord(nil, &c)) {
		t.Fatalf("completed with hops: %+v, %v", got, err)
	}
}

// The first record of a Raft entry carries the entry's term, index and
// tag in a version 2 envelope; every other record stays version 1, byte
// for byte.
func TestRaftEnvelope(t *testing.T) {
	for _, e := range sampleEvents() {
		plain := AppendRecord(nil, &e)
		e.Term, e.Entry, e.Tag = 7, 1<<40, 0xfeedface
		rec := AppendRecord(nil, &e)
		if rec[0] != FormatVersionRaft || len(rec) != len(plain)+24 || RecordSize(&e) != len(rec) {
			t.Fatalf("%s: version %d, %d bytes (RecordSize %d), %d without Raft", e.Type, rec[0], len(rec), RecordSize(&e), len(plain))
		}
		got, err := DecodeRecord(rec)
		if err != nil {
			t.Fatalf("%s: %v", e.Type, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("%s: round trip\n got %+v\nwant %+v", e.Type, got, e)
		}
		for i := range rec {
			b := bytes.Clone(rec)
			b[i] ^= 0x10
			if _, err := DecodeRecord(b); err == nil {
				t.Fatalf("%s: flip in byte %d not detected", e.Type, i)
			}
		}
	}
	// A term or an index of zero, with a good CRC, is refused: version 2
	// means a Raft entry begins here.
	for _, zero := range []int{19, 27} {
		e := Event{Type: Completed, Index: 1, Seq: 1, Term: 1, Entry: 1}
		b := AppendRecord(nil, &e)
		b = b[:len(b)-crcSize]
		clear(b[zero : zero+8])
		b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
		if _, err := DecodeRecord(b); !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("zero at %d: %v, want ErrInvalidRecord", zero, err)
		}
	}
	short := []byte{FormatVersionRaft, byte(Checkpoint), 0}
	short = append(short, make([]byte, 16+4)...)
	if _, err := DecodeRecord(short); !errors.Is(err, ErrInvalidRecord) {
		t.Errorf("a version 2 record of %d bytes: %v", len(short), err)
	}
}

func TestAppendRecordDoesNotAllocate(t *testing.T) {
	e := Event{Type: Enqueued, Index: 9, Time: 5, MessageID: "id", SessionID: "s", Message: make([]byte, 1024)}
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() { buf = AppendRecord(buf[:0], &e) })
	if allocs != 0 {
		t.Fatalf("AppendRecord allocates %v times", allocs)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	for _, e := range sampleEvents() {
		f.Add(AppendRecord(nil, &e))
		e.Term, e.Entry, e.Tag = 3, 9, 1
		f.Add(AppendRecord(nil, &e))
	}
	f.Add(make([]byte, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeRecord(b)
		if err != nil {
			return
		}
		// A record that decodes re-encodes to one that decodes the same.
		again, err := DecodeRecord(AppendRecord(nil, &e))
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if !reflect.DeepEqual(normalize(again), normalize(e)) {
			t.Fatalf("re-encoding changed the event\n got %+v\nwant %+v", again, e)
		}
	})
}

// normalize maps empty byte slices to nil: the codec does not distinguish them.
func normalize(e Event) Event {
	for _, b := range []*[]byte{&e.Props, &e.Message, &e.State} {
		if len(*b) == 0 {
			*b = nil
		}
	}
	return e
}

// BenchmarkRecordCodec1KB encodes and decodes one Enqueued record of a 1 KB
// message: the log's own cost per message, apart from I/O.
func BenchmarkRecordCodec1KB(b *testing.B) {
	e := Event{Type: Enqueued, Index: 1 << 20, Time: 1_700_000_000_000_000_000, Until: 1_700_000_060_000_000_000,
		MessageID: "3f2b8c1e-0d4a-4a57-9d8e-6c1f2a7b9e10", Message: bytes.Repeat([]byte{0x53}, 1024)}
	buf := make([]byte, 0, 2048)
	b.SetBytes(int64(RecordSize(&e)))
	for b.Loop() {
		buf = AppendRecord(buf[:0], &e)
		if _, err := DecodeRecord(buf); err != nil {
			b.Fatal(err)
		}
	}
}

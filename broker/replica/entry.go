package replica

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/walbus/walbus/log/event"
)

// The data of a Raft entry that carries events is the proposer's tag
// (a uvarint), then each event's record after its length (a uvarint). The
// records are in one form only, so that an entry read back from any
// replica's log is the bytes its leader proposed: the i-th record has
// index i (1-based; its log index is given where it is stored), no flags,
// and no Raft fields. The tag is the proposer's own number for the entry,
// to know it again when it is applied; it is stored with the entry.

// ErrEntry is wrapped by every failure to read an entry's data.
var ErrEntry = errors.New("invalid Raft entry")

// EncodeEntry is the data of an entry with the events evs (at least one)
// and the proposer's tag.
func EncodeEntry(tag uint64, evs []event.Event) []byte {
	size := event.UvarintLen(tag)
	for i := range evs {
		n := recordSize(&evs[i], i)
		size += event.UvarintLen(uint64(n)) + n
	}
	b := make([]byte, 0, size)
	b = binary.AppendUvarint(b, tag)
	for i := range evs {
		ev := canonical(evs[i], i)
		b = binary.AppendUvarint(b, uint64(event.RecordSize(&ev)))
		b = event.AppendRecord(b, &ev)
	}
	return b
}

func recordSize(ev *event.Event, i int) int {
	c := canonical(*ev, i)
	return event.RecordSize(&c)
}

// canonical is ev as the i-th record of an entry's data holds it.
func canonical(ev event.Event, i int) event.Event {
	ev.Index, ev.Flags, ev.Term, ev.Entry, ev.Tag, ev.Pos = uint64(i+1), 0, 0, 0, 0, event.Position{}
	return ev
}

// DecodeEntry reads an entry's data, in its one form only (no longer
// varints, records as EncodeEntry writes them). The events' byte slices
// alias data. Their Index is their place in the entry, from 1.
func DecodeEntry(data []byte) (tag uint64, evs []event.Event, err error) {
	tag, w := binary.Uvarint(data)
	if w <= 0 || w != event.UvarintLen(tag) {
		return 0, nil, fmt.Errorf("%w: no tag", ErrEntry)
	}
	rest := data[w:]
	for len(rest) > 0 {
		n, w := binary.Uvarint(rest)
		if w <= 0 || w != event.UvarintLen(n) || uint64(len(rest)-w) < n {
			return 0, nil, fmt.Errorf("%w: record %d runs past the end", ErrEntry, len(evs)+1)
		}
		ev, err := event.DecodeRecord(rest[w : w+int(n)])
		if err != nil {
			return 0, nil, fmt.Errorf("%w: record %d: %w", ErrEntry, len(evs)+1, err)
		}
		if ev.Index != uint64(len(evs)+1) || ev.Flags != 0 || ev.Term != 0 || ev.Type == event.Marker {
			return 0, nil, fmt.Errorf("%w: record %d is not in an entry's form", ErrEntry, len(evs)+1)
		}
		evs = append(evs, ev)
		rest = rest[w+int(n):]
	}
	if len(evs) == 0 {
		return 0, nil, fmt.Errorf("%w: no events", ErrEntry)
	}
	return tag, evs, nil
}

// Snapshot data is the entity log's index that the snapshot's state
// reaches (8 bytes), then the state machine's own encoding of that state.
// A replica that takes a snapshot goes on with its log from that index.

// EncodeSnapshot is a snapshot's data: the state after log index
// logIndex.
func EncodeSnapshot(logIndex uint64, state []byte) []byte {
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(state)), logIndex), state...)
}

// DecodeSnapshot reads a snapshot's data. state aliases data.
func DecodeSnapshot(data []byte) (logIndex uint64, state []byte, err error) {
	if len(data) < 8 {
		return 0, nil, fmt.Errorf("replica: snapshot data of %d bytes", len(data))
	}
	return binary.BigEndian.Uint64(data), data[8:], nil
}

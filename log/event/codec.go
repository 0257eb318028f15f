package event

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Record envelope, format version 1 (all integers big-endian):
//
//	offset  size  field
//	0       1     version (1; a zero byte marks a zero-filled, invalid record)
//	1       1     event type
//	2       1     flags (FlagContinued)
//	3       8     the event's own log index
//	11      8     timestamp, unix nanoseconds
//	19      n     payload, laid out as layouts[type] says
//	19+n    4     CRC32-C of bytes [0, 19+n)
//
// The index inside the envelope lets a positional read prove that it found the
// record it was looking for; the CRC covers everything, so a flipped bit
// anywhere is caught.
//
// Format version 2 is the first record of a Raft entry in a replicated
// entity log (docs/cluster.md): version 1's header, then the entry's Raft
// term, its Raft index and its proposer's tag (8 bytes each), then the
// payload and the CRC as in version 1. The records after the first of an
// entry are version 1.
const (
	FormatVersion = 1
	// FormatVersionRaft is the envelope of a Raft entry's first record.
	FormatVersionRaft = 2
	headerSize        = 19
	raftHeaderSize    = headerSize + 24
	crcSize           = 4
	MinRecordSize     = headerSize + crcSize
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrInvalidRecord is wrapped by every decoding failure of a single record.
var ErrInvalidRecord = errors.New("invalid log record")

// field names one payload field; a layout is the ordered list of fields a
// type stores.
type field uint8

const (
	fQueue field = iota
	fSeq
	fToken
	fUntil
	fTTL
	fMessageID
	fSessionID
	fReceiver
	fReason
	fDescription
	fName
	fProps
	fMessage
	fState
	fSource
	fDeliveries
	fHops
)

var layouts = map[Type][]field{
	EntityCreated: {fName, fProps},
	EntityUpdated: {fName, fProps},
	EntityDeleted: {fName},
	ClockAdvanced: {fTTL},
	NodeAddress:   {fName, fSource},

	Enqueued:          {fQueue, fUntil, fMessageID, fSessionID, fMessage},
	Scheduled:         {fQueue, fUntil, fTTL, fMessageID, fSessionID, fMessage},
	ScheduleCancelled: {fQueue, fSeq},
	Activated:         {fQueue, fSeq, fUntil, fMessageID, fSessionID, fMessage},
	Forwarded: {fQueue, fUntil, fMessageID, fSessionID, fName, fSource, fSeq, fReason, fDescription, fProps,
		fMessage},
	Restored: {fQueue, fSeq, fUntil, fDeliveries, fMessageID, fSessionID, fName, fReason, fDescription, fProps,
		fMessage},
	RestoredCopy: {fQueue, fSeq, fUntil, fDeliveries, fMessageID, fSessionID, fName, fReason, fDescription, fProps,
		fState, fMessage},
	Remembered: {fName, fMessageID, fUntil},
	Published:  {fQueue, fSeq, fUntil, fMessageID, fSessionID, fProps, fMessage},
	Copied:     {fQueue, fSeq, fUntil, fSessionID, fName, fReason, fDescription, fProps},

	SubscriptionCreated: {fQueue, fName, fProps},
	SubscriptionUpdated: {fQueue, fProps},
	SubscriptionDeleted: {fQueue},
	RuleAdded:           {fQueue, fName, fProps},
	RuleRemoved:         {fQueue, fName},

	Locked:      {fQueue, fSeq, fToken, fUntil, fReceiver},
	LockRenewed: {fQueue, fSeq, fUntil},
	LockExpired: {fQueue, fSeq},

	Completed:          {fQueue, fSeq},
	Abandoned:          {fQueue, fSeq, fProps},
	Released:           {fQueue, fSeq},
	Deferred:           {fQueue, fSeq, fProps},
	DeadLettered:       {fQueue, fSeq, fReason, fDescription, fProps},
	Expired:            {fQueue, fSeq},
	ReceivedAndDeleted: {fQueue, fSeq, fReceiver},

	TransferDeadLettered: {fQueue, fSeq, fReason, fDescription},
	Deleted:              {fQueue, fSeq},

	SessionLocked:      {fQueue, fSessionID, fUntil, fReceiver},
	SessionLockRenewed: {fQueue, fSessionID, fUntil},
	SessionUnlocked:    {fQueue, fSessionID},
	SessionStateSet:    {fQueue, fSessionID, fState},

	Checkpoint: {},
	Committed:  {fState},
	Transfer:   {fQueue, fUntil, fTTL, fMessageID, fSessionID, fName, fMessage},
	Arrived:    {fSource, fSeq},

	ScheduledHeld: {fQueue, fUntil, fTTL, fMessageID, fSessionID, fMessage},
	Confirmed:     {fQueue, fSeq, fMessageID},

	Marker: {fQueue, fState},
}

// tails names the optional field a type's payload may end with, after its
// layout. It is written only when it is not zero, so a record without it
// reads as zero: the records written before the field existed, and those
// of the (many) messages it does not concern, are unchanged. Decoding
// refuses a tail that holds zero, so every record has one encoding.
var tails = map[Type]field{
	Enqueued: fHops, Scheduled: fHops, Activated: fHops, Forwarded: fHops, Restored: fHops, RestoredCopy: fHops,
	Published: fHops, Transfer: fHops, ScheduledHeld: fHops,
}

// tail is the optional field e's record carries, if any.
func (e *Event) tail() (field, bool) {
	if e.Hops == 0 {
		return 0, false
	}
	f, ok := tails[e.Type]
	return f, ok
}

// AppendRecord appends the envelope of e (with its payload and CRC) to dst.
// It allocates only if dst lacks capacity.
func AppendRecord(dst []byte, e *Event) []byte {
	start := len(dst)
	version := byte(FormatVersion)
	if e.Term != 0 {
		version = FormatVersionRaft
	}
	dst = append(dst, version, byte(e.Type), e.Flags)
	dst = binary.BigEndian.AppendUint64(dst, e.Index)
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.Time))
	if e.Term != 0 {
		dst = binary.BigEndian.AppendUint64(dst, e.Term)
		dst = binary.BigEndian.AppendUint64(dst, e.Entry)
		dst = binary.BigEndian.AppendUint64(dst, e.Tag)
	}
	dst = appendPayload(dst, e)
	crc := crc32.Checksum(dst[start:], castagnoli)
	return binary.BigEndian.AppendUint32(dst, crc)
}

// RecordSize is the length AppendRecord will produce for e.
func RecordSize(e *Event) int {
	n := MinRecordSize
	if e.Term != 0 {
		n += raftHeaderSize - headerSize
	}
	for _, f := range layouts[e.Type] {
		n += fieldSize(e, f)
	}
	if f, ok := e.tail(); ok {
		n += fieldSize(e, f)
	}
	return n
}

func fieldSize(e *Event, f field) int {
	switch f {
	case fQueue:
		return UvarintLen(uint64(e.Queue))
	case fSeq:
		return UvarintLen(e.Seq)
	case fSource:
		return UvarintLen(e.Source)
	case fDeliveries:
		return UvarintLen(uint64(e.Deliveries))
	case fHops:
		return UvarintLen(uint64(e.Hops))
	case fToken:
		return len(e.Token)
	case fUntil:
		return UvarintLen(zigzag(e.Until))
	case fTTL:
		return UvarintLen(zigzag(e.TTL))
	}
	l := e.varLen(f)
	return UvarintLen(uint64(l)) + l
}

func appendPayload(dst []byte, e *Event) []byte {
	for _, f := range layouts[e.Type] {
		switch f {
		case fQueue:
			dst = binary.AppendUvarint(dst, uint64(e.Queue))
		case fSeq:
			dst = binary.AppendUvarint(dst, e.Seq)
		case fSource:
			dst = binary.AppendUvarint(dst, e.Source)
		case fDeliveries:
			dst = binary.AppendUvarint(dst, uint64(e.Deliveries))
		case fToken:
			dst = append(dst, e.Token[:]...)
		case fUntil:
			dst = binary.AppendVarint(dst, e.Until)
		case fTTL:
			dst = binary.AppendVarint(dst, e.TTL)
		default:
			if str, ok := e.stringField(f); ok {
				dst = AppendString(dst, str)
			} else {
				dst = AppendBytes(dst, e.bytesField(f))
			}
		}
	}
	if _, ok := e.tail(); ok {
		dst = binary.AppendUvarint(dst, uint64(e.Hops)) // the only tail field
	}
	return dst
}

// stringField returns the string field f of e, if f is one.
func (e *Event) stringField(f field) (string, bool) {
	switch f {
	case fMessageID:
		return e.MessageID, true
	case fSessionID:
		return e.SessionID, true
	case fReceiver:
		return e.Receiver, true
	case fReason:
		return e.Reason, true
	case fDescription:
		return e.Description, true
	case fName:
		return e.Name, true
	}
	return "", false
}

// bytesField returns the byte-slice field f of e.
func (e *Event) bytesField(f field) []byte {
	switch f {
	case fProps:
		return e.Props
	case fMessage:
		return e.Message
	case fState:
		return e.State
	}
	panic(fmt.Sprintf("log: field %d is not variable-length", f))
}

func (e *Event) varLen(f field) int {
	if s, ok := e.stringField(f); ok {
		return len(s)
	}
	return len(e.bytesField(f))
}

// DecodeRecord checks the envelope in b (exactly one record) and decodes it.
// Byte-slice fields of the result alias b.
func DecodeRecord(b []byte) (Event, error) {
	var e Event
	if len(b) < MinRecordSize {
		return e, fmt.Errorf("%w: %d bytes is shorter than an envelope", ErrInvalidRecord, len(b))
	}
	header := headerSize
	switch b[0] {
	case FormatVersion:
	case FormatVersionRaft:
		header = raftHeaderSize
		if len(b) < header+crcSize {
			return e, fmt.Errorf("%w: %d bytes is shorter than a Raft entry's envelope", ErrInvalidRecord, len(b))
		}
	default:
		return e, fmt.Errorf("%w: format version %d", ErrInvalidRecord, b[0])
	}
	body := b[:len(b)-crcSize]
	want := binary.BigEndian.Uint32(b[len(b)-crcSize:])
	if got := crc32.Checksum(body, castagnoli); got != want {
		return e, fmt.Errorf("%w: checksum %08x, want %08x", ErrInvalidRecord, got, want)
	}
	e.Type = Type(b[1])
	e.Flags = b[2]
	e.Index = binary.BigEndian.Uint64(b[3:11])
	e.Time = int64(binary.BigEndian.Uint64(b[11:19]))
	layout, ok := layouts[e.Type]
	if !ok {
		return e, fmt.Errorf("%w: unknown event type %d", ErrInvalidRecord, b[1])
	}
	if e.Flags&^FlagContinued != 0 {
		return e, fmt.Errorf("%w: unknown flags %#x", ErrInvalidRecord, e.Flags)
	}
	if e.Index == 0 {
		return e, fmt.Errorf("%w: index 0", ErrInvalidRecord)
	}
	if header == raftHeaderSize {
		e.Term = binary.BigEndian.Uint64(b[19:27])
		e.Entry = binary.BigEndian.Uint64(b[27:35])
		e.Tag = binary.BigEndian.Uint64(b[35:43])
		if e.Term == 0 || e.Entry == 0 {
			return e, fmt.Errorf("%w: Raft term %d, index %d", ErrInvalidRecord, e.Term, e.Entry)
		}
	}
	r := NewReader(body[header:])
	for _, f := range layout {
		readField(r, &e, f)
	}
	if r.Len() > 0 && r.Err() == nil {
		if f, ok := tails[e.Type]; ok {
			readField(r, &e, f)
			if r.Err() == nil && e.Hops == 0 {
				r.Fail("a %s tail of zero", e.Type)
			}
		}
	}
	if err := r.Done(); err != nil {
		return e, fmt.Errorf("%w: %s payload: %v", ErrInvalidRecord, e.Type, err)
	}
	return e, nil
}

func readField(r *Reader, e *Event, f field) {
	switch f {
	case fQueue:
		e.Queue = r.Uint32()
	case fSeq:
		e.Seq = r.Uvarint()
	case fSource:
		e.Source = r.Uvarint()
	case fDeliveries:
		e.Deliveries = r.Uint32()
	case fHops:
		e.Hops = r.Uint32()
	case fToken:
		copy(e.Token[:], r.Fixed(len(e.Token)))
	case fUntil:
		e.Until = r.Varint()
	case fTTL:
		e.TTL = r.Varint()
	case fMessageID:
		e.MessageID = r.String()
	case fSessionID:
		e.SessionID = r.String()
	case fReceiver:
		e.Receiver = r.String()
	case fReason:
		e.Reason = r.String()
	case fDescription:
		e.Description = r.String()
	case fName:
		e.Name = r.String()
	case fProps:
		e.Props = r.Bytes()
	case fMessage:
		e.Message = r.Bytes()
	case fState:
		e.State = r.Bytes()
	}
}

func UvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

func zigzag(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) }

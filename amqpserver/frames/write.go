package frames

import (
	"encoding/binary"
	"fmt"
	"sync"
)

// BeginFrame reserves a frame header (data offset 2) at the end of dst and
// returns its offset for EndFrame. Writing the body between the two calls
// with a concrete type's AppendTo keeps frame writing allocation-free.
func BeginFrame(dst []byte, typ FrameType, channel uint16) ([]byte, int) {
	start := len(dst)
	return AppendHeader(dst, Header{DataOffset: 2, Type: typ, Channel: channel}), start
}

// EndFrame fills in the size of the frame begun at start.
func EndFrame(dst []byte, start int) []byte {
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start))
	return dst
}

// AppendFrame writes a whole frame: header, performative and payload.
// Passing the performative as an interface may make it escape to the
// heap; hot paths use BeginFrame/EndFrame instead.
func AppendFrame(dst []byte, typ FrameType, channel uint16, p Performative, payload []byte) []byte {
	dst, start := BeginFrame(dst, typ, channel)
	dst = p.AppendTo(dst)
	dst = append(dst, payload...)
	return EndFrame(dst, start)
}

// AppendEmptyFrame writes a heartbeat: an AMQP frame on channel 0 with no
// body (§2.4.5).
func AppendEmptyFrame(dst []byte) []byte {
	return append(dst, 0, 0, 0, HeaderSize, 2, byte(TypeAMQP), 0, 0)
}

// AppendTransferFrame writes one frame of a delivery: the performative t
// and as much of payload as fits in maxFrameSize. It returns the payload
// still to send, which the caller passes to the next call with a
// continuation performative (see Continuation) once the session window
// allows. t.More is set on the frame when payload remains; otherwise the
// frame keeps t.More as given.
func AppendTransferFrame(dst []byte, channel uint16, t *Transfer, payload []byte, maxFrameSize uint32) (out, rest []byte, err error) {
	dst, start := BeginFrame(dst, TypeAMQP, channel)
	bodyStart := len(dst)
	more := t.More
	t.More = true
	dst = t.AppendTo(dst)
	t.More = more
	room := int64(maxFrameSize) - int64(len(dst)-start)
	if room < 0 || (room == 0 && len(payload) > 0) {
		return dst[:start], payload, fmt.Errorf("%w: %d bytes", ErrFrameTooSmall, maxFrameSize)
	}
	if int64(len(payload)) <= room {
		// Everything fits: rewrite the performative with the caller's More,
		// which is never longer than the one measured.
		dst = t.AppendTo(dst[:bodyStart])
		dst = append(dst, payload...)
		return EndFrame(dst, start), nil, nil
	}
	dst = append(dst, payload[:room]...)
	return EndFrame(dst, start), payload[room:], nil
}

// Continuation returns the performative for the later frames of the
// delivery t starts: only the handle, as the delivery-id, tag and format
// may be left out after the first frame (§2.7.5).
func (t *Transfer) Continuation() Transfer {
	return Transfer{Handle: t.Handle}
}

// AppendTransferFrames writes a whole delivery as frames of at most
// maxFrameSize bytes and returns how many frames it took; each uses one
// transfer-id of the session window (§2.5.6).
func AppendTransferFrames(dst []byte, channel uint16, t *Transfer, payload []byte, maxFrameSize uint32) ([]byte, int, error) {
	start := len(dst)
	dst, rest, err := AppendTransferFrame(dst, channel, t, payload, maxFrameSize)
	if err != nil {
		return dst[:start], 0, err
	}
	frames := 1
	next := t.Continuation()
	for len(rest) > 0 {
		if dst, rest, err = AppendTransferFrame(dst, channel, &next, rest, maxFrameSize); err != nil {
			return dst[:start], 0, err
		}
		frames++
	}
	return dst, frames, nil
}

// TransferFrameCount says how many frames AppendTransferFrames will use for
// a payload of payloadLen bytes, without writing them, so a session can
// check its outgoing window first.
func TransferFrameCount(t *Transfer, payloadLen int, maxFrameSize uint32) (int, error) {
	first := transferRoom(t, maxFrameSize)
	next := t.Continuation()
	later := transferRoom(&next, maxFrameSize)
	if first < 0 || (int64(payloadLen) > first && later <= 0) {
		return 0, fmt.Errorf("%w: %d bytes", ErrFrameTooSmall, maxFrameSize)
	}
	if int64(payloadLen) <= first {
		return 1, nil
	}
	remaining := int64(payloadLen) - first
	return 1 + int((remaining+later-1)/later), nil
}

// transferRoom is the payload space left in a frame after t's header and
// performative, measured with More set as AppendTransferFrame does.
func transferRoom(t *Transfer, maxFrameSize uint32) int64 {
	more := *t
	more.More = true
	var size int
	if isPlainState(t.State) {
		var scratch [128]byte
		size = len(more.appendPlain(scratch[:0]))
	} else {
		// Rejected and modified states carry maps; they are rare on
		// transfers, so a pooled buffer is good enough for them.
		scratch := scratchPool.Get().(*[]byte)
		*scratch = more.AppendTo((*scratch)[:0])
		size = len(*scratch)
		scratchPool.Put(scratch)
	}
	return int64(maxFrameSize) - HeaderSize - int64(size)
}

var scratchPool = sync.Pool{New: func() any {
	b := make([]byte, 0, 256)
	return &b
}}

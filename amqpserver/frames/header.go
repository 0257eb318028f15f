package frames

import (
	"encoding/binary"
	"fmt"
)

// FrameType is byte 5 of the frame header (AMQP 1.0 §2.3.1).
type FrameType uint8

// Frame types: AMQP frames carry performatives (§2.3.2), SASL frames carry
// the SASL exchange (§5.3.1).
const (
	TypeAMQP FrameType = 0
	TypeSASL FrameType = 1
)

// HeaderSize is the fixed part of a frame header.
const HeaderSize = 8

// MinMaxFrameSize is the largest frame every peer must accept: the limit
// before open is exchanged (§2.4.1) and for every SASL frame (§5.3.1).
const MinMaxFrameSize = 512

// Header is a decoded frame header (§2.3.1).
type Header struct {
	Size       uint32 // whole frame, these 8 bytes included
	DataOffset uint8  // body start, in 4-byte words
	Type       FrameType
	Channel    uint16 // AMQP frames only; ignored for SASL
}

// ParseHeader decodes and checks the first 8 bytes of b. A frame smaller
// than 8 bytes, a data offset below 2, or a body starting past the frame's
// end is malformed; so is an unknown type, as only AMQP and SASL frames are
// defined.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d bytes, need %d", ErrMalformedFrame, len(b), HeaderSize)
	}
	h := Header{
		Size:       binary.BigEndian.Uint32(b),
		DataOffset: b[4],
		Type:       FrameType(b[5]),
		Channel:    binary.BigEndian.Uint16(b[6:]),
	}
	switch {
	case h.Size < HeaderSize:
		return Header{}, fmt.Errorf("%w: size %d below %d", ErrMalformedFrame, h.Size, HeaderSize)
	case h.DataOffset < 2:
		return Header{}, fmt.Errorf("%w: data offset %d below 2", ErrMalformedFrame, h.DataOffset)
	case uint32(h.DataOffset)*4 > h.Size:
		return Header{}, fmt.Errorf("%w: data offset %d past the frame size %d", ErrMalformedFrame, h.DataOffset, h.Size)
	case h.Type != TypeAMQP && h.Type != TypeSASL:
		return Header{}, fmt.Errorf("%w: unknown frame type %d", ErrMalformedFrame, h.Type)
	}
	return h, nil
}

// BodyOffset is where the body starts; any bytes between HeaderSize and
// it are an extended header, which AMQP and SASL frames ignore.
func (h Header) BodyOffset() int { return 4 * int(h.DataOffset) }

// BodySize is the number of body bytes.
func (h Header) BodySize() int { return int(h.Size) - h.BodyOffset() }

// IsEmpty reports a frame without a body: for AMQP a heartbeat (§2.4.5),
// for SASL an error (§5.3.1).
func (h Header) IsEmpty() bool { return h.BodySize() == 0 }

// ParseFrame decodes the frame at the start of b, which must hold all of
// it, and returns its header and body. The frame ends at b[h.Size:].
func ParseFrame(b []byte) (Header, []byte, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return Header{}, nil, err
	}
	if uint64(h.Size) > uint64(len(b)) {
		return Header{}, nil, fmt.Errorf("%w: size %d but only %d bytes present", ErrMalformedFrame, h.Size, len(b))
	}
	return h, b[h.BodyOffset():h.Size:h.Size], nil
}

// AppendHeader writes h. A zero DataOffset is written as 2, the usual
// header without extension.
func AppendHeader(dst []byte, h Header) []byte {
	if h.DataOffset == 0 {
		h.DataOffset = 2
	}
	dst = binary.BigEndian.AppendUint32(dst, h.Size)
	dst = append(dst, h.DataOffset, byte(h.Type))
	return binary.BigEndian.AppendUint16(dst, h.Channel)
}

// ProtocolID is byte 4 of the protocol header (§2.2, §5.1).
type ProtocolID uint8

// Protocol ids: plain AMQP, TLS, and SASL.
const (
	ProtocolAMQP ProtocolID = 0
	ProtocolTLS  ProtocolID = 2
	ProtocolSASL ProtocolID = 3
)

// ProtocolHeader is the 8-byte header "AMQP" id major minor revision that
// opens each direction of a connection, and again after SASL (§2.2).
type ProtocolHeader struct {
	ID       ProtocolID
	Major    uint8
	Minor    uint8
	Revision uint8
}

// ErrProtocolHeader is returned for 8 bytes that do not start with "AMQP".
var ErrProtocolHeader = fmt.Errorf("%w: not an AMQP protocol header", ErrMalformedFrame)

// ParseProtocolHeader decodes the first 8 bytes of b. It accepts any
// version and id so the caller can answer an unsupported one with the
// header it does support (§2.2).
func ParseProtocolHeader(b []byte) (ProtocolHeader, error) {
	if len(b) < 8 || string(b[:4]) != "AMQP" {
		return ProtocolHeader{}, ErrProtocolHeader
	}
	return ProtocolHeader{ID: ProtocolID(b[4]), Major: b[5], Minor: b[6], Revision: b[7]}, nil
}

// Supported reports version 1.0.0 with a known protocol id.
func (p ProtocolHeader) Supported() bool {
	known := p.ID == ProtocolAMQP || p.ID == ProtocolTLS || p.ID == ProtocolSASL
	return known && p.Major == 1 && p.Minor == 0 && p.Revision == 0
}

// AppendProtocolHeader writes the version 1.0.0 header for id.
func AppendProtocolHeader(dst []byte, id ProtocolID) []byte {
	return append(dst, 'A', 'M', 'Q', 'P', byte(id), 1, 0, 0)
}

package encoding

import (
	"errors"
	"strconv"
)

// ErrDecode is matched (errors.Is) by every decoding failure, so the server
// can answer malformed input with amqp:decode-error (AMQP 1.0 §2.8.15).
var ErrDecode = errors.New("amqp decode error")

// ErrLimitExceeded is matched by failures caused by a Limits bound rather
// than by malformed bytes. Such errors match ErrDecode too.
var ErrLimitExceeded = errors.New("amqp decode limit exceeded")

// ErrUnsupportedValue is returned by AppendAny for a Go value that has no
// AMQP mapping.
var ErrUnsupportedValue = errors.New("amqp: unsupported Go value")

// DecodeError describes where and why decoding stopped.
type DecodeError struct {
	Offset int    // byte offset in the buffer given to the Reader
	Reason string // what was wrong there
	limit  bool
}

func (e *DecodeError) Error() string {
	return "amqp decode error at offset " + strconv.Itoa(e.Offset) + ": " + e.Reason
}

// Is makes errors.Is(err, ErrDecode) true for every DecodeError, and
// errors.Is(err, ErrLimitExceeded) true for those caused by Limits.
func (e *DecodeError) Is(target error) bool {
	return target == ErrDecode || (e.limit && target == ErrLimitExceeded)
}

func decodeErr(offset int, reason string) error {
	return &DecodeError{Offset: offset, Reason: reason}
}

func limitErr(offset int, reason string) error {
	return &DecodeError{Offset: offset, Reason: reason, limit: true}
}

func unexpectedCode(offset int, what string, code byte) error {
	return decodeErr(offset, "expected "+what+", found format code 0x"+strconv.FormatUint(uint64(code), 16))
}

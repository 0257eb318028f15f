package message

import "github.com/walbus/walbus/amqpserver/encoding"

// listWriter writes the fields of a section list in order and drops the
// trailing nulls when it ends (AMQP 1.0 §1.4 lets them be omitted).
type listWriter struct {
	start     int
	count     int
	keepLen   int
	keepCount int
}

func beginList(dst []byte, code uint64) ([]byte, listWriter) {
	dst = encoding.AppendDescriptor(dst, code)
	dst, start := encoding.BeginList(dst)
	return dst, listWriter{start: start, keepLen: len(dst)}
}

func (w *listWriter) kept(dst []byte) []byte {
	w.count++
	w.keepLen, w.keepCount = len(dst), w.count
	return dst
}

func (w *listWriter) null(dst []byte) []byte {
	w.count++
	return encoding.AppendNull(dst)
}

func (w *listWriter) end(dst []byte) []byte {
	return encoding.EndList(dst[:w.keepLen], w.start, w.keepCount)
}

func (w *listWriter) flag(dst []byte, v bool) []byte {
	if !v {
		return w.null(dst)
	}
	return w.kept(encoding.AppendBool(dst, true))
}

func (w *listWriter) id(dst []byte, id ID) []byte {
	if id.Kind == IDNone {
		return w.null(dst)
	}
	return w.kept(appendID(dst, id))
}

func (w *listWriter) binary(dst []byte, v []byte) []byte {
	if v == nil {
		return w.null(dst)
	}
	return w.kept(encoding.AppendBinary(dst, v))
}

// text writes a string or symbol field with the given encoder, nil as null.
func (w *listWriter) text(dst []byte, v []byte, appendText func([]byte, []byte) []byte) []byte {
	if v == nil {
		return w.null(dst)
	}
	return w.kept(appendText(dst, v))
}

func (w *listWriter) timestamp(dst []byte, present bool, v encoding.Timestamp) []byte {
	if !present {
		return w.null(dst)
	}
	return w.kept(encoding.AppendTimestamp(dst, v))
}

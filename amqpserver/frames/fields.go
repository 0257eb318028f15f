package frames

import "github.com/walbus/walbus/amqpserver/encoding"

// fieldWriter writes a composite's fields in order. Fields are written as
// they come, nulls included, and end cuts the list back to the last
// non-null field: trailing nulls may be omitted (AMQP 1.0 §1.4), which
// keeps frames short and matches what peers send.
type fieldWriter struct {
	start     int // offset of the reserved list header
	count     int // fields written so far
	keepLen   int // buffer length after the last non-null field
	keepCount int // fields up to and including the last non-null one
}

func beginComposite(dst []byte, code uint64) ([]byte, fieldWriter) {
	dst = encoding.AppendDescriptor(dst, code)
	dst, start := encoding.BeginList(dst)
	return dst, fieldWriter{start: start, keepLen: len(dst)}
}

// kept records that a non-null field was just appended.
func (w *fieldWriter) kept(dst []byte) []byte {
	w.count++
	w.keepLen, w.keepCount = len(dst), w.count
	return dst
}

func (w *fieldWriter) null(dst []byte) []byte {
	w.count++
	return encoding.AppendNull(dst)
}

func (w *fieldWriter) end(dst []byte) []byte {
	return encoding.EndList(dst[:w.keepLen], w.start, w.keepCount)
}

func (w *fieldWriter) uint(dst []byte, v uint32) []byte {
	return w.kept(encoding.AppendUint(dst, v))
}

func (w *fieldWriter) optUint(dst []byte, v Optional[uint32]) []byte {
	if !v.Present {
		return w.null(dst)
	}
	return w.uint(dst, v.Value)
}

func (w *fieldWriter) optUshort(dst []byte, v Optional[uint16]) []byte {
	if !v.Present {
		return w.null(dst)
	}
	return w.kept(encoding.AppendUshort(dst, v.Value))
}

func (w *fieldWriter) optUlong(dst []byte, v Optional[uint64]) []byte {
	if !v.Present {
		return w.null(dst)
	}
	return w.kept(encoding.AppendUlong(dst, v.Value))
}

// optUbyte writes settle modes and codes, always as 0x50 (go-amqp rejects
// any other encoding of a ubyte).
func (w *fieldWriter) optUbyte(dst []byte, present bool, v uint8) []byte {
	if !present {
		return w.null(dst)
	}
	return w.kept(encoding.AppendUbyte(dst, v))
}

// boolean writes a mandatory boolean, false included.
func (w *fieldWriter) boolean(dst []byte, v bool) []byte {
	return w.kept(encoding.AppendBool(dst, v))
}

// flag writes a boolean whose default is false, as null when false.
func (w *fieldWriter) flag(dst []byte, v bool) []byte {
	if !v {
		return w.null(dst)
	}
	return w.boolean(dst, v)
}

func (w *fieldWriter) str(dst []byte, v string) []byte {
	if v == "" {
		return w.null(dst)
	}
	return w.kept(encoding.AppendString(dst, v))
}

func (w *fieldWriter) sym(dst []byte, v encoding.Symbol) []byte {
	if v == "" {
		return w.null(dst)
	}
	return w.kept(encoding.AppendSymbol(dst, v))
}

func (w *fieldWriter) symbols(dst []byte, v []encoding.Symbol) []byte {
	if len(v) == 0 {
		return w.null(dst)
	}
	return w.kept(encoding.AppendSymbolArray(dst, v))
}

// binary writes nil as null and anything else, empty included, as binary.
func (w *fieldWriter) binary(dst []byte, v []byte) []byte {
	if v == nil {
		return w.null(dst)
	}
	return w.kept(encoding.AppendBinary(dst, v))
}

// fields writes a map of dynamic values (a "fields" or filter-set map).
// A value AppendAny cannot encode is a programming error in the broker;
// rather than fail a frame write for it, the map is cut at that entry and
// closed, so the frame stays well formed and the test suite (which encodes
// every map the broker builds) catches the mistake.
func (w *fieldWriter) fields(dst []byte, m encoding.Map) []byte {
	if m == nil {
		return w.null(dst)
	}
	return w.kept(appendMapBestEffort(dst, m))
}

func appendMapBestEffort(dst []byte, m encoding.Map) []byte {
	dst, start := encoding.BeginMap(dst)
	pairs := 0
	for _, e := range m {
		mark := len(dst)
		var err error
		if dst, err = encoding.AppendAny(dst, e.Key); err == nil {
			dst, err = encoding.AppendAny(dst, e.Value)
		}
		if err != nil {
			dst = dst[:mark]
			break
		}
		pairs++
	}
	return encoding.EndMap(dst, start, pairs)
}

// anyValue writes a dynamic value, or null when it cannot be encoded.
func (w *fieldWriter) anyValue(dst []byte, v any) []byte {
	if v == nil {
		return w.null(dst)
	}
	mark := len(dst)
	out, err := encoding.AppendAny(dst, v)
	if err != nil {
		return w.null(out[:mark])
	}
	return w.kept(out)
}

// appender is a composite that can write itself.
type appender interface {
	AppendTo(dst []byte) []byte
}

// composite writes a nested composite, or null when it is absent. Callers
// pass a typed nil check result since a nil pointer in an interface is not
// nil.
func (w *fieldWriter) composite(dst []byte, present bool, v appender) []byte {
	if !present {
		return w.null(dst)
	}
	return w.kept(v.AppendTo(dst))
}

package encoding

import "encoding/binary"

// ReadListHeader reads the constructor, size and count of a list (§1.6.22)
// and leaves r at its first item. end is the offset just past the list; a
// caller that stops early can Seek there.
func (r *Reader) ReadListHeader() (count, end int, err error) {
	at := r.off
	code, err := r.readCode()
	if err != nil {
		return 0, 0, err
	}
	switch code {
	case CodeList0:
		return 0, r.off, nil
	case CodeList8, CodeList32:
		return r.readCompoundSizes(at, code == CodeList32, "list")
	}
	r.off = at
	return 0, 0, unexpectedCode(at, "list", code)
}

// ReadMapHeader reads the constructor, size and count of a map (§1.6.23).
// count is the number of items, keys and values together, and is even.
func (r *Reader) ReadMapHeader() (count, end int, err error) {
	at := r.off
	code, err := r.readCode()
	if err != nil {
		return 0, 0, err
	}
	if code != CodeMap8 && code != CodeMap32 {
		r.off = at
		return 0, 0, unexpectedCode(at, "map", code)
	}
	count, end, err = r.readCompoundSizes(at, code == CodeMap32, "map")
	if err == nil && count%2 != 0 {
		return 0, 0, decodeErr(at, "map has an odd number of items")
	}
	return count, end, err
}

// readCompoundSizes reads the size and count that follow a list or map
// code. Every item has at least a one-byte constructor, so a count larger
// than the bytes present is rejected here, before anyone allocates for it.
func (r *Reader) readCompoundSizes(at int, wide bool, what string) (count, end int, err error) {
	size, n, err := r.readSizeAndCount(at, wide, what)
	if err != nil {
		return 0, 0, err
	}
	end = r.off + size
	if uint64(n) > uint64(size) {
		return 0, 0, decodeErr(at, what+" count exceeds its size")
	}
	return int(n), end, nil
}

// readSizeAndCount reads the size and count fields shared by compounds and
// arrays (§1.2.3-1.2.4) and returns the size left after the count field,
// checked against the bytes present.
func (r *Reader) readSizeAndCount(at int, wide bool, what string) (rest int, count uint32, err error) {
	width := 1
	if wide {
		width = 4
	}
	b, err := r.take(2 * width)
	if err != nil {
		return 0, 0, err
	}
	var size uint32
	if wide {
		size, count = binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])
	} else {
		size, count = uint32(b[0]), uint32(b[1])
	}
	if size < uint32(width) {
		return 0, 0, decodeErr(at, what+" size is smaller than its count field")
	}
	rest64 := uint64(size) - uint64(width)
	if rest64 > uint64(r.Len()) {
		return 0, 0, decodeErr(at, what+" size exceeds the data present")
	}
	return int(rest64), count, nil
}

// ArrayHeader describes an array (§1.6.24) whose elements follow.
type ArrayHeader struct {
	Count int // number of elements
	End   int // offset just past the array
	// ElementCode is the format code shared by all elements.
	ElementCode byte
	// Descriptor is the encoded descriptor shared by all elements when the
	// element constructor is described, and nil otherwise.
	Descriptor []byte
}

// ReadArrayHeader reads an array's constructor, size, count and element
// constructor, leaving r at the first element's data. The count is checked
// against the smallest possible element, so it can be trusted for
// allocation only together with a Limits bound (zero-width elements such
// as null take no bytes at all).
func (r *Reader) ReadArrayHeader() (ArrayHeader, error) {
	at := r.off
	code, err := r.readCode()
	if err != nil {
		return ArrayHeader{}, err
	}
	if code != CodeArray8 && code != CodeArray32 {
		r.off = at
		return ArrayHeader{}, unexpectedCode(at, "array", code)
	}
	h, off, err := arrayBody(r.buf, at, r.off, code == CodeArray32, 0, DefaultLimits.MaxDepth)
	if err != nil {
		return ArrayHeader{}, err
	}
	r.off = off
	return h, nil
}

// arrayBody reads what follows an array format code at off: size, count
// and the element constructor. It returns the header and the offset of the
// first element. It also serves arrays nested as elements of another array,
// whose format code is the outer element constructor. Like the skip
// functions it works on the buffer and an offset rather than a *Reader:
// they call each other recursively, and a Reader passed around such a
// cycle would be forced onto the heap.
func arrayBody(buf []byte, at, off int, wide bool, depth, maxDepth int) (ArrayHeader, int, error) {
	r := Reader{buf: buf, off: off}
	size, count, err := r.readSizeAndCount(at, wide, "array")
	if err != nil {
		return ArrayHeader{}, 0, err
	}
	h := ArrayHeader{Count: int(count), End: r.off + size}
	inner := Reader{buf: buf[:h.End], off: r.off}
	elem, err := inner.readCode()
	if err != nil {
		return ArrayHeader{}, 0, decodeErr(at, "array has no element constructor")
	}
	if elem == CodeDescribed {
		start := inner.off
		if inner.off, err = skipValue(inner.buf, inner.off, depth+1, maxDepth); err != nil {
			return ArrayHeader{}, 0, err
		}
		h.Descriptor = buf[start:inner.off:inner.off]
		if elem, err = inner.readCode(); err != nil {
			return ArrayHeader{}, 0, decodeErr(at, "described array has no element code")
		}
	}
	// One level of description is all the spec's types use; deeper ones
	// and extension codes are rejected rather than guessed at.
	if elem == CodeDescribed || hasExtType(elem) || elem>>4 < subFixed0 {
		return ArrayHeader{}, 0, unexpectedCode(at, "array element constructor", elem)
	}
	h.ElementCode = elem
	if min := minElementSize(elem); min > 0 && uint64(count)*uint64(min) > uint64(h.End-inner.off) {
		return ArrayHeader{}, 0, decodeErr(at, "array count exceeds its size")
	}
	return h, inner.off, nil
}

// minElementSize is the fewest bytes one array element with this code can
// take: its fixed width, or the size and count fields of its layout.
func minElementSize(code byte) int {
	if w, ok := fixedWidth(code); ok {
		return w
	}
	switch code >> 4 {
	case subVariable1:
		return 1
	case subVariable4:
		return 4
	case subCompound1:
		return 2
	case subCompound4:
		return 8
	case subArray1:
		return 3
	case subArray4:
		return 9
	}
	return 1
}

// Descriptor identifies a described type (§1.5): numeric, as
// (domain << 32) | id, or symbolic such as "amqp:open:list".
type Descriptor struct {
	Code     uint64
	Name     []byte // the symbol, aliasing the input, when Symbolic
	Symbolic bool
}

// ReadDescriptor reads the 0x00 prefix of a described value and its
// descriptor, leaving r at the described value's constructor. Descriptors
// of types other than ulong and symbol are reserved and rejected here.
func (r *Reader) ReadDescriptor() (Descriptor, error) {
	at := r.off
	code, err := r.readCode()
	if err != nil {
		return Descriptor{}, err
	}
	if code != CodeDescribed {
		r.off = at
		return Descriptor{}, unexpectedCode(at, "described type", code)
	}
	next, err := r.PeekCode()
	if err != nil {
		return Descriptor{}, err
	}
	if next == CodeSym8 || next == CodeSym32 {
		name, err := r.ReadSymbolBytes()
		return Descriptor{Name: name, Symbolic: true}, err
	}
	switch next {
	case CodeUlong0, CodeSmallUlong, CodeUlong:
		v, err := r.ReadUlong()
		return Descriptor{Code: v}, err
	}
	return Descriptor{}, unexpectedCode(r.off, "ulong or symbol descriptor", next)
}

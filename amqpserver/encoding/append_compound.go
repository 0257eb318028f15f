package encoding

import (
	"encoding/binary"
	"math"
)

// Lists, maps and arrays start with their size and count (AMQP 1.0 §1.2.3,
// §1.2.4), which a writer rarely knows in advance. The Begin functions
// reserve the 32-bit header, the caller appends the items, and the End
// functions fill the header in, shrinking it to the 8-bit form when size and
// count both fit. Shrinking moves the items 6 bytes left inside dst, so no
// allocation is needed either way.

// compound32Header is code, 4-byte size and 4-byte count.
const compound32Header = 9

// shrinkBy is what the 8-bit header (code, size, count) saves.
const shrinkBy = compound32Header - 3

// BeginList reserves a list header at the end of dst. It returns the new
// buffer and the header's offset, to be passed to EndList.
func BeginList(dst []byte) ([]byte, int) {
	return reserveHeader(dst)
}

// EndList completes the list begun at start, holding count items. An empty
// list becomes list0, a small one list8, anything else list32 (§1.6.22).
func EndList(dst []byte, start, count int) []byte {
	if count == 0 && len(dst) == start+compound32Header {
		return append(dst[:start], CodeList0)
	}
	return endCompound(dst, start, count, CodeList8, CodeList32)
}

// BeginMap reserves a map header at the end of dst; see BeginList.
func BeginMap(dst []byte) ([]byte, int) {
	return reserveHeader(dst)
}

// EndMap completes the map begun at start, holding pairs key/value pairs.
// The wire count is the number of items, twice the pairs (§1.6.23).
func EndMap(dst []byte, start, pairs int) []byte {
	return endCompound(dst, start, 2*pairs, CodeMap8, CodeMap32)
}

// BeginArray reserves an array header at the end of dst. The caller then
// appends the element constructor once (for example CodeUUID, or a
// descriptor followed by a code) and after it each element's data without a
// constructor (§1.2.4).
func BeginArray(dst []byte) ([]byte, int) {
	return reserveHeader(dst)
}

// EndArray completes the array begun at start, holding count elements.
func EndArray(dst []byte, start, count int) []byte {
	return endCompound(dst, start, count, CodeArray8, CodeArray32)
}

func reserveHeader(dst []byte) ([]byte, int) {
	start := len(dst)
	return append(dst, 0, 0, 0, 0, 0, 0, 0, 0, 0), start
}

func endCompound(dst []byte, start, count int, code8, code32 byte) []byte {
	body := len(dst) - start - compound32Header
	if body+1 <= math.MaxUint8 && count <= math.MaxUint8 {
		dst[start] = code8
		dst[start+1] = byte(body + 1)
		dst[start+2] = byte(count)
		copy(dst[start+3:], dst[start+compound32Header:])
		return dst[:len(dst)-shrinkBy]
	}
	patchCompound32(dst, start, count, code32)
	return dst
}

// patchCompound32 fills in a reserved header in its 32-bit form. It is used
// directly where every element of an array must share one width.
func patchCompound32(dst []byte, start, count int, code32 byte) {
	body := len(dst) - start - compound32Header
	dst[start] = code32
	binary.BigEndian.PutUint32(dst[start+1:], uint32(body+4))
	binary.BigEndian.PutUint32(dst[start+5:], uint32(count))
}

// AppendDescriptor writes the constructor prefix of a described value with
// a numeric descriptor, (domain << 32) | id (§1.5). Composite types are
// sent this way because some peers (go-amqp) only decode numeric ones.
func AppendDescriptor(dst []byte, code uint64) []byte {
	return AppendUlong(append(dst, CodeDescribed), code)
}

// AppendSymbolicDescriptor writes the constructor prefix of a described
// value with a symbolic descriptor such as "amqp:open:list".
func AppendSymbolicDescriptor(dst []byte, name Symbol) []byte {
	return AppendSymbol(append(dst, CodeDescribed), name)
}

// AppendSymbolArray writes symbols as one array, sym8 when every symbol
// fits and sym32 otherwise (one constructor serves all elements, §1.2.4).
// It is the usual encoding of "multiple" symbol fields (§1.4).
func AppendSymbolArray(dst []byte, v []Symbol) []byte {
	wide := false
	for _, s := range v {
		wide = wide || len(s) > math.MaxUint8
	}
	dst, start := BeginArray(dst)
	if wide {
		dst = append(dst, CodeSym32)
	} else {
		dst = append(dst, CodeSym8)
	}
	for _, s := range v {
		dst = appendElementLength(dst, wide, len(s))
		dst = append(dst, s...)
	}
	return EndArray(dst, start, len(v))
}

// AppendStringArray writes strings as one array of str8 or str32.
func AppendStringArray(dst []byte, v []string) []byte {
	wide := false
	for _, s := range v {
		wide = wide || len(s) > math.MaxUint8
	}
	dst, start := BeginArray(dst)
	if wide {
		dst = append(dst, CodeStr32)
	} else {
		dst = append(dst, CodeStr8)
	}
	for _, s := range v {
		dst = appendElementLength(dst, wide, len(s))
		dst = append(dst, s...)
	}
	return EndArray(dst, start, len(v))
}

// AppendUUIDArray writes an array of uuid, the form management operations
// use for lock tokens.
func AppendUUIDArray(dst []byte, v []UUID) []byte {
	dst, start := BeginArray(dst)
	dst = append(dst, CodeUUID)
	for i := range v {
		dst = append(dst, v[i][:]...)
	}
	return EndArray(dst, start, len(v))
}

// AppendLongArray writes an array of long (8-byte elements), the form
// management operations use for sequence numbers.
func AppendLongArray(dst []byte, v []int64) []byte {
	dst, start := BeginArray(dst)
	dst = append(dst, CodeLong)
	for _, n := range v {
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	return EndArray(dst, start, len(v))
}

// AppendTimestampArray writes an array of timestamp, the form renew-lock
// uses for expirations.
func AppendTimestampArray(dst []byte, v []Timestamp) []byte {
	dst, start := BeginArray(dst)
	dst = append(dst, CodeTimestamp)
	for _, t := range v {
		dst = binary.BigEndian.AppendUint64(dst, uint64(t))
	}
	return EndArray(dst, start, len(v))
}

func appendElementLength(dst []byte, wide bool, n int) []byte {
	if wide {
		return binary.BigEndian.AppendUint32(dst, uint32(n))
	}
	return append(dst, byte(n))
}

package encoding

// Skip consumes the next value, described or not, checking as it goes that
// the value is well formed: every nested size and count must agree with the
// bytes inside it. Codes it does not know are skipped by their subcategory
// (AMQP 1.0 §1.2), so a newer peer's types do not break older decoders.
func (r *Reader) Skip() error {
	end, err := skipValue(r.buf, r.off, 0, DefaultLimits.MaxDepth)
	if err != nil {
		return err
	}
	r.off = end
	return nil
}

// ReadRaw consumes the next value like Skip and returns its encoded bytes,
// constructor included, without copying.
func (r *Reader) ReadRaw() ([]byte, error) {
	start := r.off
	if err := r.Skip(); err != nil {
		return nil, err
	}
	return r.buf[start:r.off:r.off], nil
}

// The skip functions take the buffer and an offset and return the offset
// after what they skipped. They are recursive, and passing a *Reader
// through the recursion would make every caller's Reader escape to the
// heap; plain offsets keep Skip allocation-free.

// skipValue skips one constructor and its data starting at off. depth
// counts the enclosing compounds and descriptors so that hostile nesting
// cannot exhaust the stack.
func skipValue(buf []byte, off, depth, maxDepth int) (int, error) {
	at := off
	if off >= len(buf) {
		return 0, decodeErr(off, "unexpected end of data")
	}
	code := buf[off]
	off++
	if code == CodeDescribed {
		if depth >= maxDepth {
			return 0, limitErr(at, "values nested too deeply")
		}
		off, err := skipValue(buf, off, depth+1, maxDepth)
		if err != nil {
			return 0, err
		}
		return skipValue(buf, off, depth+1, maxDepth)
	}
	if hasExtType(code) {
		if off >= len(buf) {
			return 0, decodeErr(off, "unexpected end of data")
		}
		off++
	}
	return skipData(buf, at, off, code, depth, maxDepth)
}

// skipData skips what follows a (non-described) format code at off: the
// whole value at top level, or one element's data inside an array.
func skipData(buf []byte, at, off int, code byte, depth, maxDepth int) (int, error) {
	r := Reader{buf: buf, off: off}
	if w, ok := fixedWidth(code); ok {
		_, err := r.take(w)
		return r.off, err
	}
	switch code >> 4 {
	case subVariable1, subVariable4:
		_, err := r.variableData(at, code>>4 == subVariable4)
		return r.off, err
	case subCompound1, subCompound4:
		end, count, err := skipCompound(buf, at, off, code>>4 == subCompound4, depth, maxDepth)
		if err == nil && (code == CodeMap8 || code == CodeMap32) && count%2 != 0 {
			// A map holds key/value pairs (§1.6.23).
			return 0, decodeErr(at, "map has an odd number of items")
		}
		return end, err
	case subArray1, subArray4:
		if depth >= maxDepth {
			return 0, limitErr(at, "values nested too deeply")
		}
		h, first, err := arrayBody(buf, at, off, code>>4 == subArray4, depth, maxDepth)
		if err != nil {
			return 0, err
		}
		return skipElements(buf, at, first, h, depth, maxDepth)
	}
	return 0, decodeErr(at, "invalid format code")
}

// skipCompound skips a list or map body and returns the offset after it
// and its item count.
func skipCompound(buf []byte, at, off int, wide bool, depth, maxDepth int) (int, uint32, error) {
	if depth >= maxDepth {
		return 0, 0, limitErr(at, "values nested too deeply")
	}
	r := Reader{buf: buf, off: off}
	size, count, err := r.readSizeAndCount(at, wide, "compound")
	if err != nil {
		return 0, 0, err
	}
	end := r.off + size
	pos := r.off
	for i := uint32(0); i < count; i++ {
		if pos, err = skipValue(buf[:end], pos, depth+1, maxDepth); err != nil {
			return 0, 0, err
		}
	}
	if pos != end {
		return 0, 0, decodeErr(at, "compound size does not match its items")
	}
	return end, count, nil
}

// skipElements skips the element data of an array whose header has been
// read, starting at off. Fixed-width elements are skipped arithmetically:
// a zero-width element type allows billions of elements in a few bytes.
func skipElements(buf []byte, at, off int, h ArrayHeader, depth, maxDepth int) (int, error) {
	if w, ok := fixedWidth(h.ElementCode); ok {
		if uint64(h.Count)*uint64(w) != uint64(h.End-off) {
			return 0, decodeErr(at, "array size does not match its elements")
		}
		return h.End, nil
	}
	elems := buf[:h.End]
	pos := off
	var err error
	for i := 0; i < h.Count; i++ {
		if pos, err = skipData(elems, pos, pos, h.ElementCode, depth+1, maxDepth); err != nil {
			return 0, err
		}
	}
	if pos != h.End {
		return 0, decodeErr(at, "array size does not match its elements")
	}
	return h.End, nil
}

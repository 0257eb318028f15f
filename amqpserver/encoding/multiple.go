package encoding

// ReadSymbols reads a field declared multiple="true" of type symbol
// (AMQP 1.0 §1.4): null, a single symbol, or an array of symbols. The
// symbols are appended to dst. Null and an empty array both add nothing,
// which is what the spec says they mean.
func (r *Reader) ReadSymbols(dst []Symbol) ([]Symbol, error) {
	at := r.off
	code, err := r.PeekCode()
	if err != nil {
		return dst, err
	}
	switch code {
	case CodeNull:
		r.off++
		return dst, nil
	case CodeSym8, CodeSym32:
		s, err := r.ReadSymbol()
		return append(dst, s), err
	case CodeArray8, CodeArray32:
	default:
		return dst, unexpectedCode(at, "symbol or array of symbols", code)
	}
	h, err := r.ReadArrayHeader()
	if err != nil {
		return dst, err
	}
	if h.ElementCode != CodeSym8 && h.ElementCode != CodeSym32 {
		return dst, unexpectedCode(at, "array of symbols", h.ElementCode)
	}
	elems := Reader{buf: r.buf[:h.End], off: r.off}
	for i := 0; i < h.Count; i++ {
		b, err := elems.variableData(at, h.ElementCode == CodeSym32)
		if err != nil {
			return dst, err
		}
		dst = append(dst, Symbol(b))
	}
	if elems.off != h.End {
		return dst, decodeErr(at, "array size does not match its elements")
	}
	r.off = h.End
	return dst, nil
}

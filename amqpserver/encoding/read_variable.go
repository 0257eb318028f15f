package encoding

import "encoding/binary"

// readVariable reads a variable-width value whose constructor is code8 or
// code32 and returns its data as a sub-slice of the input.
func (r *Reader) readVariable(code8, code32 byte, what string) ([]byte, error) {
	at := r.off
	code, err := r.readCode()
	if err != nil {
		return nil, err
	}
	var n int
	switch code {
	case code8:
		b, err := r.take(1)
		if err != nil {
			return nil, err
		}
		n = int(b[0])
	case code32:
		b, err := r.take(4)
		if err != nil {
			return nil, err
		}
		size := binary.BigEndian.Uint32(b)
		if uint64(size) > uint64(r.Len()) {
			return nil, decodeErr(at, what+" length exceeds the data present")
		}
		n = int(size)
	default:
		r.off = at
		return nil, unexpectedCode(at, what, code)
	}
	return r.take(n)
}

// ReadBinary reads a binary (§1.6.19) and returns it without copying.
func (r *Reader) ReadBinary() ([]byte, error) {
	return r.readVariable(CodeVbin8, CodeVbin32, "binary")
}

// ReadStringBytes reads a string (§1.6.20) and returns its UTF-8 bytes
// without copying or validating them.
func (r *Reader) ReadStringBytes() ([]byte, error) {
	return r.readVariable(CodeStr8, CodeStr32, "string")
}

// ReadString reads a string into a new Go string.
func (r *Reader) ReadString() (string, error) {
	b, err := r.ReadStringBytes()
	return string(b), err
}

// ReadSymbolBytes reads a symbol (§1.6.21) without copying.
func (r *Reader) ReadSymbolBytes() ([]byte, error) {
	return r.readVariable(CodeSym8, CodeSym32, "symbol")
}

// ReadSymbol reads a symbol into a new Symbol.
func (r *Reader) ReadSymbol() (Symbol, error) {
	b, err := r.ReadSymbolBytes()
	return Symbol(b), err
}

// ReadStringOrSymbolBytes reads a string or a symbol without copying. Keys
// looked up by name (annotations, application properties, management
// bodies) arrive as either, depending on the client.
func (r *Reader) ReadStringOrSymbolBytes() ([]byte, error) {
	code, err := r.PeekCode()
	if err != nil {
		return nil, err
	}
	if code == CodeSym8 || code == CodeSym32 {
		return r.ReadSymbolBytes()
	}
	return r.ReadStringBytes()
}

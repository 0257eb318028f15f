package frames

// Optional is a field that can be absent (null on the wire) as opposed to
// holding its zero value.
type Optional[T any] struct {
	Value   T
	Present bool
}

// Some returns a present Optional holding v.
func Some[T any](v T) Optional[T] {
	return Optional[T]{Value: v, Present: true}
}

// Or returns the value when present, and def otherwise: the spec's default
// for a null field.
func (o Optional[T]) Or(def T) T {
	if o.Present {
		return o.Value
	}
	return def
}

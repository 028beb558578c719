package redisscript

import "fmt"

// Reply is one script's reply as Redis sent it, read with the checked
// accessors below; a mismatch is an error wrapping ErrUnexpectedReply that
// names the script. The zero Reply is a nil reply.
type Reply struct {
	script string
	v      any
}

// Int is an integer reply.
func (r Reply) Int() (int64, error) {
	n, ok := r.v.(int64)
	if !ok {
		return 0, fmt.Errorf("script %s: %w: reply %v (%T), want an integer", r.script, ErrUnexpectedReply, r.v, r.v)
	}
	return n, nil
}

// Ints reads an array of exactly len(dst) integers into dst.
func (r Reply) Ints(dst []int64) error {
	arr, ok := r.v.([]any)
	if !ok || len(arr) != len(dst) {
		return fmt.Errorf("script %s: %w: reply %v (%T), want %d integers", r.script, ErrUnexpectedReply, r.v, r.v, len(dst))
	}
	for i, x := range arr {
		n, ok := x.(int64)
		if !ok {
			return fmt.Errorf("script %s: %w: reply[%d] = %v (%T), want an integer", r.script, ErrUnexpectedReply, i, x, x)
		}
		dst[i] = n
	}
	return nil
}

// Array is a Decoder over a non-empty array reply.
func (r Reply) Array() (Decoder, error) {
	arr, ok := r.v.([]any)
	if !ok || len(arr) == 0 {
		return Decoder{}, fmt.Errorf("script %s: %w: reply is %T", r.script, ErrUnexpectedReply, r.v)
	}
	return NewDecoder(r.script, arr), nil
}

// StatusOK is the status of a script that did what it was asked.
const StatusOK = "ok"

// Status reads the convention of the store's scripts: a non-empty array
// whose first element is a status string. With StatusOK it returns the
// Decoder and nil; with another status, the Decoder (the elements after
// the status may say more) and refused(status) — the caller's typed error
// for that status. A reply of another shape is an error wrapping
// ErrUnexpectedReply.
func (r Reply) Status(refused func(script, status string) error) (Decoder, error) {
	d, err := r.Array()
	if err != nil {
		return d, err
	}
	if status := d.Str(0); status != StatusOK {
		if err := d.Err(); err != nil {
			return d, err
		}
		return d, refused(r.script, status)
	}
	return d, nil
}

// Decoder reads an array reply with checked assertions. The first mismatch
// (wrong type, missing element) is kept as a sticky error, shared with the
// decoders of nested arrays; reads after it return zero values. Check Err
// once after reading. The zero Decoder has no reply: Err reports it.
type Decoder struct {
	what string
	r    []any
	err  *error
}

// NewDecoder returns a Decoder over r; what names it in errors.
func NewDecoder(what string, r []any) Decoder {
	return Decoder{what: what, r: r, err: new(error)}
}

// Err is the first mismatch, wrapping ErrUnexpectedReply, or nil.
func (d Decoder) Err() error {
	if d.err == nil {
		return fmt.Errorf("decode %s: %w: no reply", d.what, ErrUnexpectedReply)
	}
	return *d.err
}

// Len is the number of elements.
func (d Decoder) Len() int { return len(d.r) }

// Fail records a mismatch the caller found (a value out of its range), if
// none is recorded yet.
func (d Decoder) Fail(format string, args ...any) {
	if d.err != nil && *d.err == nil {
		*d.err = fmt.Errorf("decode %s: %w: %s", d.what, ErrUnexpectedReply, fmt.Sprintf(format, args...))
	}
}

func (d Decoder) at(i int) any {
	if i < 0 || i >= len(d.r) {
		d.Fail("element %d of a %d-element reply", i, len(d.r))
		return nil
	}
	return d.r[i]
}

// Int is the integer at i.
func (d Decoder) Int(i int) int64 {
	v, ok := d.at(i).(int64)
	if !ok {
		d.Fail("element %d: want an integer, got %T", i, d.at(i))
	}
	return v
}

// Str is the string at i.
func (d Decoder) Str(i int) string {
	v, ok := d.at(i).(string)
	if !ok {
		d.Fail("element %d: want a string, got %T", i, d.at(i))
	}
	return v
}

// List is a Decoder over the array at i, sharing d's error.
func (d Decoder) List(i int) Decoder {
	v, ok := d.at(i).([]any)
	if !ok {
		d.Fail("element %d: want an array, got %T", i, d.at(i))
	}
	return Decoder{what: d.what, r: v, err: d.err}
}

// Fields reads the elements from index from on as field/value pairs (an
// HGETALL).
func (d Decoder) Fields(from int) map[string]string {
	if (len(d.r)-from)%2 != 0 {
		d.Fail("odd number of field/value elements from %d", from)
	}
	m := make(map[string]string, (len(d.r)-from)/2)
	for i := from; i+1 < len(d.r); i += 2 {
		m[d.Str(i)] = d.Str(i + 1)
	}
	return m
}

package job

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// UTF8Error is CheckUTF8's error for a job whose JSON is not valid UTF-8
// (RFC 8259 §8.1): a string holding bytes that are no UTF-8 encoding, which
// Go's decoder (Parse) would replace with U+FFFD in a field and keep as they
// are in payload.
type UTF8Error struct {
	// Offset is the byte offset of the first invalid byte in the JSON.
	Offset int
	// Path locates the string holding it: "payload.items[2]", "event", or
	// "a key of payload"; "" when it could not be located.
	Path string
}

func (e *UTF8Error) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("invalid UTF-8 at byte %d", e.Offset)
	}
	return fmt.Sprintf("invalid UTF-8 in %s (byte %d)", e.Path, e.Offset)
}

// CheckUTF8 returns a *UTF8Error, locating the first invalid byte, when
// the JSON text data is not valid UTF-8 anywhere (a field, a key, the
// payload); nil otherwise. Producers' jobs are checked with it before Parse.
func CheckUTF8(data []byte) error {
	if utf8.Valid(data) {
		return nil
	}
	off := invalidOffset(data)
	return &UTF8Error{Offset: off, Path: jsonPathAt(data, off)}
}

// invalidOffset is the offset of the first byte of data that starts no
// valid UTF-8 encoding (data is known to hold one).
func invalidOffset(data []byte) int {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(data)
}

// pathFrame is one open object or array while jsonPathAt walks the JSON.
type pathFrame struct {
	object bool
	key    string // object: the current member's key
	index  int    // array: the current element's index
	inKey  bool   // object: the next string token is a key
}

// next moves f past one complete value.
func (f *pathFrame) next() {
	if f.object {
		f.inKey = true
	} else {
		f.index++
	}
}

// pathString renders the open frames as "payload.items[2]".
func pathString(stack []pathFrame) string {
	var b []byte
	for _, f := range stack {
		switch {
		case f.object && len(b) == 0:
			b = append(b, f.key...)
		case f.object:
			b = append(append(b, '.'), f.key...)
		default:
			b = append(append(append(b, '['), strconv.Itoa(f.index)...), ']')
		}
	}
	return string(b)
}

// jsonPathAt names the string token of the JSON text data that covers byte
// off: the path of the value ("payload.a[2]", "event"), or "a key of <path>"
// ("a key of the job" at the top level) when it is an object key; "" when
// data is not one JSON value.
func jsonPathAt(data []byte, off int) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	var stack []pathFrame
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				stack = append(stack, pathFrame{object: d == '{', inKey: true})
				continue
			}
			stack = stack[:len(stack)-1]
			if len(stack) > 0 {
				stack[len(stack)-1].next()
			}
			continue
		}
		var top *pathFrame
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		isKey := top != nil && top.object && top.inKey
		if dec.InputOffset() > int64(off) {
			switch {
			case isKey && len(stack) == 1:
				return "a key of the job"
			case isKey:
				return "a key of " + pathString(stack[:len(stack)-1])
			default:
				return pathString(stack)
			}
		}
		switch {
		case isKey:
			top.key, top.inKey = tok.(string), false
		case top != nil:
			top.next()
		}
	}
}

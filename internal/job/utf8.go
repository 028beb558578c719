package job

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// UTF8Error is CheckUTF8's error for a job whose JSON is not valid UTF-8
// (RFC 8259 §8.1): a string holding bytes that are no UTF-8 encoding, which
// Go's decoder (Parse) would replace with U+FFFD in a field and keep as they
// are in payload; or a \u escape of a UTF-16 surrogate that is not half of
// a pair (\ud800 alone: no Unicode character, RFC 8259 §8.2), which Redis's
// cjson refuses to decode.
type UTF8Error struct {
	// Offset is the byte offset of the first invalid byte in the JSON, or
	// of the backslash of the unpaired surrogate's escape.
	Offset int
	// Path locates the string holding it: "payload.items[2]", "event", or
	// "a key of payload"; "" when it could not be located.
	Path string
	// Escape is the unpaired surrogate's escape ("\ud800"); "" when the
	// problem is a byte.
	Escape string
}

func (e *UTF8Error) Error() string {
	what := "invalid UTF-8"
	if e.Escape != "" {
		what = "unpaired UTF-16 surrogate " + e.Escape
	}
	if e.Path == "" {
		return fmt.Sprintf("%s at byte %d", what, e.Offset)
	}
	return fmt.Sprintf("%s in %s (byte %d)", what, e.Path, e.Offset)
}

// CheckUTF8 returns a *UTF8Error, locating the first problem, when the
// JSON text data is not valid UTF-8 anywhere (a field, a key, the payload)
// or a string holds an escaped unpaired surrogate; nil otherwise.
// Producers' jobs are checked with it before Parse.
func CheckUTF8(data []byte) error {
	if !utf8.Valid(data) {
		off := invalidOffset(data)
		return &UTF8Error{Offset: off, Path: jsonPathAt(data, off)}
	}
	if off := unpairedSurrogate(data); off >= 0 {
		return &UTF8Error{Offset: off, Path: jsonPathAt(data, off), Escape: string(data[off : off+6])}
	}
	return nil
}

// unpairedSurrogate is the offset of the first \u escape in a string of the
// JSON text data that encodes a UTF-16 surrogate outside a high-low pair;
// -1 when there is none.
func unpairedSurrogate(data []byte) int {
	in := false // inside a string
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case !in:
			in = c == '"'
		case c == '"':
			in = false
		case c != '\\':
		case i+1 < len(data) && data[i+1] != 'u':
			i++ // a one-letter escape
		default:
			switch r := escapedUnit(data, i); {
			case r < 0:
				i++
			case utf16.IsSurrogate(rune(r)) && r < 0xdc00 && isLowSurrogate(escapedUnit(data, i+6)):
				i += 11 // the pair
			case utf16.IsSurrogate(rune(r)):
				return i
			default:
				i += 5
			}
		}
	}
	return -1
}

// escapedUnit is the UTF-16 code unit of the \uXXXX escape at data[i:];
// -1 when there is none.
func escapedUnit(data []byte, i int) int {
	if i+6 > len(data) || data[i] != '\\' || data[i+1] != 'u' {
		return -1
	}
	n, err := strconv.ParseUint(string(data[i+2:i+6]), 16, 16)
	if err != nil {
		return -1
	}
	return int(n)
}

func isLowSurrogate(r int) bool { return r >= 0xdc00 && r <= 0xdfff }

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

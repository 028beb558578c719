package wire

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// decodeBatchFast decodes raw when it is exactly what EncodeBatch writes
// (encoding/json.Marshal of a Batch: compact, the fields in declaration
// order, the omitempty ones only when set, strings with encoding/json's
// escapes) and reports whether it did. For any other text — whitespace,
// another order or case, unknown, repeated or null members, a lone
// surrogate, invalid UTF-8, an integer out of range — it reports false
// and DecodeBatch decodes raw the general way, so the two agree on every
// batch this accepts. A worker decodes one batch per delivered batch task:
// this path, without reflection, costs a fraction of the general one.
func decodeBatchFast(raw []byte) (Batch, bool) {
	d := fastDecoder{s: raw}
	// Room for every job at once: each opens with {"id": (as a signing
	// secret does, so this may be more).
	b := Batch{Jobs: make([]Payload, 0, bytes.Count(raw, []byte(`{"id":`)))}
	if !(d.lit(`{"shard":`) && d.int(&b.Shard) && d.lit(`,"jobs":[`) && list(&d, &b.Jobs, (*fastDecoder).payload) &&
		d.lit("}") && d.i == len(d.s)) {
		return Batch{}, false
	}
	return b, true
}

// fastDecoder reads s from i on; every method reports whether what it
// expected was there.
type fastDecoder struct {
	s []byte
	i int
}

func (d *fastDecoder) payload(p *Payload) bool {
	if !(d.lit(`{"id":`) && d.str(&p.ID) && d.lit(`,"gen":`) && d.int64(&p.Gen) &&
		d.lit(`,"slot_us":`) && d.int64(&p.SlotUS)) {
		return false
	}
	return optional(d, `,"claimed":`, &p.Claimed, (*fastDecoder).claimed) && d.lit("}")
}

func (d *fastDecoder) claimed(c *Claimed) bool {
	if !(d.lit(`{"tenant":`) && d.str(&c.Tenant) && d.lit(`,"type":`) && d.str(&c.Type) &&
		d.lit(`,"body":`) && d.str(&c.Body) && d.lit(`,"attempt":`) && d.int64(&c.Attempt) &&
		d.lit(`,"timeout_us":`) && d.int64(&c.TimeoutUS) && d.lit(`,"slot_us":`) && d.int64(&c.SlotUS) &&
		d.lit(`,"created_us":`) && d.int64(&c.CreatedUS) && d.lit(`,"cost":`) && d.int64(&c.Cost)) {
		return false
	}
	if d.lit(`,"upstreams":[`) && !list(d, &c.Upstreams, (*fastDecoder).str) {
		return false
	}
	return optional(d, `,"signing":`, &c.Signing, (*fastDecoder).signing) && d.lit("}")
}

func (d *fastDecoder) signing(s *Signing) bool {
	if !(d.lit(`{"now_us":`) && d.int64(&s.NowUS)) {
		return false
	}
	if d.lit(`,"unsigned":true`) {
		s.Unsigned = true
	}
	if d.lit(`,"secrets":[`) && !list(d, &s.Secrets, (*fastDecoder).secret) {
		return false
	}
	return d.lit("}")
}

func (d *fastDecoder) secret(x *SigningSecret) bool {
	if !(d.lit(`{"id":`) && d.str(&x.ID) && d.lit(`,"created_us":`) && d.int64(&x.CreatedUS)) {
		return false
	}
	if d.lit(`,"expires_us":`) && !d.int64(&x.ExpiresUS) {
		return false
	}
	return d.lit(`,"sealed":`) && d.str(&x.Sealed) && d.lit("}")
}

// optional reads an omitempty object member: when s continues with key
// (its comma, name and colon), a new *out read with read; else nothing.
func optional[T any](d *fastDecoder, key string, out **T, read func(*fastDecoder, *T) bool) bool {
	if !d.lit(key) {
		return true
	}
	*out = new(T)
	return read(d, *out)
}

// list reads the items of a list whose opening bracket d has read, each
// with item, up to its closing bracket; an empty list is refused (an
// omitempty list is not written empty; DecodeBatch refuses a batch of no
// jobs).
func list[T any](d *fastDecoder, out *[]T, item func(*fastDecoder, *T) bool) bool {
	for !d.peek(']') {
		if len(*out) > 0 && !d.lit(",") {
			return false
		}
		var zero T
		*out = append(*out, zero) // read in place: a local would escape
		if !item(d, &(*out)[len(*out)-1]) {
			return false
		}
	}
	return len(*out) > 0
}

// lit consumes t when s continues with it.
func (d *fastDecoder) lit(t string) bool {
	if len(d.s)-d.i < len(t) || string(d.s[d.i:d.i+len(t)]) != t {
		return false
	}
	d.i += len(t)
	return true
}

// peek consumes c when it comes next (a list's closing bracket).
func (d *fastDecoder) peek(c byte) bool {
	if d.i < len(d.s) && d.s[d.i] == c {
		d.i++
		return true
	}
	return false
}

// int64 reads a JSON integer as encoding/json writes one: an optional
// minus, then 0 or digits not starting with 0; no fraction or exponent.
// More than 18 digits (which could overflow) are left to the general
// decoder.
func (d *fastDecoder) int64(v *int64) bool {
	neg := d.peek('-')
	digits := d.i
	var n int64
	for d.i < len(d.s) && d.s[d.i] >= '0' && d.s[d.i] <= '9' {
		n = n*10 + int64(d.s[d.i]-'0')
		d.i++
	}
	if k := d.i - digits; k == 0 || k > 18 || k > 1 && d.s[digits] == '0' {
		return false
	}
	if d.i < len(d.s) && (d.s[d.i] == '.' || d.s[d.i] == 'e' || d.s[d.i] == 'E') {
		return false
	}
	if neg {
		n = -n
	}
	*v = n
	return true
}

func (d *fastDecoder) int(v *int) bool {
	var n int64
	if !d.int64(&n) || int64(int(n)) != n {
		return false
	}
	*v = int(n)
	return true
}

// str reads a JSON string: valid UTF-8, no control character, the escapes
// \" \\ \/ \b \f \n \r \t and \uXXXX outside the surrogates.
func (d *fastDecoder) str(v *string) bool {
	if !d.peek('"') {
		return false
	}
	start := d.i
	plain := true // no escape: the string is s[start:i] as it is
	for d.i < len(d.s) && d.s[d.i] != '"' {
		switch c := d.s[d.i]; {
		case c < 0x20:
			return false
		case c == '\\':
			plain = false
			d.i += 2 // the escaped byte is checked below; a quote there does not end the string
		default:
			d.i++
		}
	}
	if d.i >= len(d.s) {
		return false
	}
	seg := d.s[start:d.i]
	d.i++ // the closing quote
	if plain {
		if !utf8.Valid(seg) {
			return false
		}
		*v = string(seg)
		return true
	}
	out, ok := unescape(seg)
	*v = out
	return ok
}

// unescape decodes the escapes of seg (a string's contents whose escapes
// str delimited), refusing what decodeBatchFast leaves to the general
// decoder.
func unescape(seg []byte) (string, bool) {
	var out strings.Builder
	out.Grow(len(seg))
	for i := 0; i < len(seg); {
		c := seg[i]
		if c != '\\' {
			j := i + 1
			for j < len(seg) && seg[j] != '\\' {
				j++
			}
			if !utf8.Valid(seg[i:j]) {
				return "", false
			}
			out.Write(seg[i:j])
			i = j
			continue
		}
		if i+1 >= len(seg) {
			return "", false
		}
		switch e := seg[i+1]; e {
		case '"', '\\', '/':
			out.WriteByte(e)
		case 'b':
			out.WriteByte('\b')
		case 'f':
			out.WriteByte('\f')
		case 'n':
			out.WriteByte('\n')
		case 'r':
			out.WriteByte('\r')
		case 't':
			out.WriteByte('\t')
		case 'u':
			r, ok := hex4(seg[i+2:])
			if !ok || r >= 0xd800 && r < 0xe000 {
				return "", false
			}
			out.WriteRune(r)
			i += 6
			continue
		default:
			return "", false
		}
		i += 2
	}
	return out.String(), true
}

// hex4 reads the four hex digits of a \uXXXX escape at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

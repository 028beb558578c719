package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// DecodeObject decodes one JSON object from r into a T, strictly: unknown
// fields, null and anything after the object are errors, each naming what
// ("decode <what>: …"). The API's policy and upstream bodies go through it
// (policy.DecodeJSON, upstream.DecodeJSON).
func DecodeObject[T any](r io.Reader, what string) (T, error) {
	var zero T
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var v *T
	if err := dec.Decode(&v); err != nil {
		return zero, fmt.Errorf("decode %s: %w", what, err)
	}
	if v == nil {
		return zero, fmt.Errorf("decode %s: want a JSON object, got null", what)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return zero, fmt.Errorf("decode %s: trailing data after the object", what)
	}
	return *v, nil
}

// Package job parses and validates the job bodies producers send to
// POST /v1/tenants/{tenant}/jobs (docs/design.md §6) and turns them into the canonical
// JSON Sluice stores. It does no I/O.
//
// Every job default and bound is declared once, here; the API and the
// store's direct callers check a job by the same rules.
package job

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/internal/upstream"
	"github.com/sluicehq/sluice/internal/wire"
)

// Bounds of a job, beyond the byte limits of the config. These are the only
// declarations of them: the API and the store check jobs with this package.
const (
	MaxEventLen      = 256
	MaxTaskTypeLen   = 256
	MaxIdemKeyLen    = 255 // bytes of printable ASCII (CheckIdemKey)
	MaxAttemptsLimit = 100
	MaxHeaders       = 64
	// MaxPayloadDepth bounds how deep arrays and objects nest in payload
	// (a bare number or string is depth 0, [] is 1). Redis's cjson, which
	// reads a task job's body in the dispatch script, stops at 1000.
	MaxPayloadDepth  = 512
	DefaultTaskQueue = "default"
	// MaxDelay bounds delay: 10¹³ µs, about 115 days (2777h46m40s).
	MaxDelay = 10_000_000_000_000 * time.Microsecond
	// MaxRunAtUS bounds run_at, in µs since 1970: 2⁵² µs (in 2112) keeps
	// every sum of a time and an interval exact in the store's Lua doubles.
	MaxRunAtUS        = 1 << 52
	maxHeaderValueLen = 8 << 10
)

// MaxRunAt is the latest run_at, MaxRunAtUS after 1970, in UTC.
var MaxRunAt = time.UnixMicro(MaxRunAtUS).UTC()

// Methods an http job may use.
var Methods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// Spec is one job as a producer sends it. Fields not of its Type must be
// absent. The zero value is not valid.
type Spec struct {
	Type string `json:"type"`

	// webhook
	Event string `json:"event,omitempty"`
	// webhook and task: any JSON value
	Payload json.RawMessage `json:"payload,omitempty"`
	// webhook and http: absolute http(s) URL
	URL string `json:"url,omitempty"`

	// http
	Method     string            `json:"method,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	Body       *string           `json:"body,omitempty"`
	BodyBase64 *string           `json:"body_base64,omitempty"`

	// task
	TaskType string `json:"task_type,omitempty"`
	Queue    string `json:"queue,omitempty"`

	// all
	Cost        *int64 `json:"cost,omitempty"`         // tokens, default 1
	Delay       string `json:"delay,omitempty"`        // Go duration ≥ 0
	RunAt       string `json:"run_at,omitempty"`       // RFC 3339
	MaxAttempts *int   `json:"max_attempts,omitempty"` // overrides the policy's retry.max_attempts
	// Callback, when set, is told of the job's terminal state (succeeded,
	// dead, canceled) by a signed POST.
	Callback *Callback `json:"callback,omitempty"`
	// Upstreams are the shared upstream quotas the job consumes (at most
	// upstream.MaxPerJob valid, distinct names; Check sorts them). Absent
	// (nil): the tenant policy's default upstreams apply, resolved by the
	// API before the job is stored; [] names none, whatever the policy.
	Upstreams []string `json:"upstreams,omitzero"`

	// batch items only
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// Callback is where a job's terminal state is POSTed.
type Callback struct {
	// URL is checked like a job's url (CheckURL).
	URL string `json:"url"`
}

// Rules are the deployment's limits a Spec is checked against.
type Rules struct {
	// TaskQueues is the allow-list of asynq queues for task jobs.
	TaskQueues []string
	// MaxCost is the largest cost the tenant's policy admits (min(burst, admit.burst)).
	MaxCost int64
}

// FieldError says which field is wrong and why. Validate returns all of them
// joined with errors.Join.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Parse decodes one job object strictly (unknown fields are errors). It
// does not check UTF-8: a producer's job goes through CheckUTF8 first (the
// API does), a stored job has been.
func Parse(data []byte) (Spec, error) {
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Spec{}, fmt.Errorf("decode job: %w", err)
	}
	return s, nil
}

// ParseStored decodes a stored job (Canonical's JSON, as the worker reads
// it back) like Parse, strictly (unknown fields are errors), but with
// github.com/go-json-experiment/json, several times faster than Parse's
// encoding/json, with encoding/json's leniency otherwise (names matched
// without case, duplicate names and invalid UTF-8 accepted). Unlike Parse
// it refuses data after the job object, which a stored job never has;
// its errors' wording is not Parse's.
func ParseStored(data []byte) (Spec, error) {
	var s Spec
	if err := jsonv2.Unmarshal(data, &s, storedDecoding); err != nil {
		return Spec{}, fmt.Errorf("decode stored job: %w", err)
	}
	return s, nil
}

// storedDecoding are ParseStored's options: Parse's strictness and
// encoding/json's leniency.
var storedDecoding = jsonv2.JoinOptions(jsonv2.RejectUnknownMembers(true), jsonv2.MatchCaseInsensitiveNames(true),
	jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))

// Validate checks s against r and returns every problem at once, as
// *FieldError values joined by errors.Join; nil when s is valid. It is
// Check without the Attrs.
func (s *Spec) Validate(r Rules) error {
	_, err := s.Check(r)
	return err
}

// Check validates s against r, filling in the defaults (cost 1, the task
// queue DefaultTaskQueue), and returns every problem at once, as
// *FieldError values joined by errors.Join; nil when s is valid. It parses
// delay and run_at (the only place they are parsed) into the job's Attrs,
// which are meaningful only when the error is nil: a run_at at or before
// 1970 reads as none (as soon as the rate allows).
func (s *Spec) Check(r Rules) (Attrs, error) {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	switch s.Type {
	case wire.TypeWebhook:
		s.validateWebhook(add)
	case wire.TypeHTTP:
		s.validateHTTP(add)
	case wire.TypeTask:
		s.validateTask(r, add)
	default:
		checkType(s.Type, add)
	}
	if d := depth(s.Payload); d > MaxPayloadDepth {
		add("payload", "nests arrays and objects %d deep, at most %d", d, MaxPayloadDepth)
	}
	a := s.attrs(r, add)
	return a, errors.Join(errs...)
}

type adder func(field, format string, args ...any)

func (s *Spec) validateWebhook(add adder) {
	checkURL(s.URL, add)
	if s.Event == "" || len(s.Event) > MaxEventLen {
		add("event", "required, 1 to %d bytes", MaxEventLen)
	}
	s.forbid(add, "method", s.Method != "", "headers", s.Headers != nil, "body", s.Body != nil,
		"body_base64", s.BodyBase64 != nil, "task_type", s.TaskType != "", "queue", s.Queue != "")
}

func (s *Spec) validateHTTP(add adder) {
	checkURL(s.URL, add)
	if !slices.Contains(Methods, s.Method) {
		add("method", "%q is not one of %v", s.Method, Methods)
	}
	if len(s.Headers) > MaxHeaders {
		add("headers", "%d headers, at most %d", len(s.Headers), MaxHeaders)
	}
	for name, value := range s.Headers {
		for _, p := range headerProblems(name, value) {
			add("headers", "%s", p)
		}
	}
	if s.Body != nil && s.BodyBase64 != nil {
		add("body", "give body or body_base64, not both")
	}
	if s.BodyBase64 != nil {
		if _, err := base64.StdEncoding.DecodeString(*s.BodyBase64); err != nil {
			add("body_base64", "not standard base64: %v", err)
		}
	}
	s.forbid(add, "event", s.Event != "", "payload", s.Payload != nil, "task_type", s.TaskType != "", "queue", s.Queue != "")
}

func (s *Spec) validateTask(r Rules, add adder) {
	if s.TaskType == "" || len(s.TaskType) > MaxTaskTypeLen {
		add("task_type", "required, 1 to %d bytes", MaxTaskTypeLen)
	}
	if s.Queue == "" {
		s.Queue = DefaultTaskQueue
	}
	if !slices.Contains(r.TaskQueues, s.Queue) {
		add("queue", "%q is not in the task_queues allow-list %v", s.Queue, r.TaskQueues)
	}
	s.forbid(add, "url", s.URL != "", "event", s.Event != "", "method", s.Method != "", "headers", s.Headers != nil,
		"body", s.Body != nil, "body_base64", s.BodyBase64 != nil)
}

// attrs checks the fields every type has and returns them as Attrs.
func (s *Spec) attrs(r Rules, add adder) Attrs {
	if s.Cost == nil {
		one := int64(1)
		s.Cost = &one
	}
	a := Attrs{Type: s.Type, Cost: *s.Cost, IdemKey: s.IdempotencyKey}
	checkCost(a.Cost, r.MaxCost, add)
	if s.Delay != "" && s.RunAt != "" {
		add("delay", "give delay or run_at, not both")
	}
	a.Delay, a.RunAt = s.schedule(add)
	if s.MaxAttempts != nil && (*s.MaxAttempts < 1 || *s.MaxAttempts > MaxAttemptsLimit) {
		add("max_attempts", "must be 1 to %d, got %d", MaxAttemptsLimit, *s.MaxAttempts)
	}
	if err := CheckIdemKey(a.IdemKey); err != nil {
		add("idempotency_key", "%v", err)
	}
	if s.Callback != nil {
		if err := CheckURL(s.Callback.URL); err != nil {
			add("callback.url", "%v", err)
		}
		a.Callback = s.Callback.URL
	}
	checkUpstreams(s.Upstreams, add)
	s.Upstreams = upstream.Sorted(s.Upstreams)
	a.Upstreams = s.Upstreams
	return a
}

// schedule parses and checks delay and run_at ("" = none) on their own; a
// run_at at or before 1970 reads as none.
func (s *Spec) schedule(add adder) (delay time.Duration, runAt time.Time) {
	if s.Delay != "" {
		d, err := time.ParseDuration(s.Delay)
		if err != nil {
			add("delay", "not a Go duration: %q", s.Delay)
		} else {
			delay = d
			checkDelay(d, s.Delay, add)
		}
	}
	if s.RunAt != "" {
		t, err := time.Parse(time.RFC3339Nano, s.RunAt)
		switch {
		case err != nil:
			add("run_at", "not an RFC 3339 time: %q", s.RunAt)
		case t.UnixMicro() > 0:
			runAt = t
			checkRunAt(t, add)
		}
	}
	return delay, runAt
}

// forbid adds an error for each (name, present) pair that is present: a
// field that does not belong to the job's type.
func (s *Spec) forbid(add adder, pairs ...any) {
	for i := 0; i < len(pairs); i += 2 {
		if pairs[i+1].(bool) {
			add(pairs[i].(string), "not a field of %s jobs", s.Type)
		}
	}
}

// Canonical is the JSON Sluice stores for the job: the spec with defaults
// filled in, without the scheduling and idempotency fields (they live in the
// job record). s must be valid.
func (s *Spec) Canonical() []byte {
	c := *s
	c.Delay, c.RunAt, c.IdempotencyKey, c.Cost = "", "", "", nil
	b, _ := json.Marshal(c) // cannot fail: plain fields and valid RawMessage
	return b
}

func checkURL(raw string, add adder) {
	if err := CheckURL(raw); err != nil {
		add("url", "%v", err)
	}
}

// CheckURL checks the url of a webhook or http job: an absolute http or
// https URL with a host, without credentials, an IPv6 zone only on a
// link-local address (the egress guard decides on those), its port (if any)
// 1 to 65535, holding nothing Go's client would write to the request
// line as it is — no space, other whitespace or ASCII control character
// anywhere, no byte outside ASCII in the query (percent-encode them). The error says what is wrong without naming the
// field. The sender (internal/webhook) applies it again to stored jobs.
func CheckURL(raw string) error {
	u, _ := url.Parse(raw) // nil when it does not parse
	return CheckParsedURL(raw, u)
}

// CheckParsedURL is CheckURL(raw) for a caller that has parsed raw already:
// u is url.Parse(raw)'s URL, nil when it failed. It returns what CheckURL
// returns, without parsing raw again (the sender parses a stored job's URL
// once for its request).
func CheckParsedURL(raw string, u *url.URL) error {
	if raw == "" {
		return errors.New("required, an absolute http or https URL")
	}
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c <= ' ' || c == 0x7f {
			return fmt.Errorf("byte %d is a space or a control character (0x%02x); percent-encode it", i, c)
		}
	}
	if u == nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("%q is not an absolute http or https URL", raw)
	}
	if u.User != nil {
		return errors.New("credentials in the URL are not allowed; use headers")
	}
	if host := u.Hostname(); strings.Contains(host, "%") && !linkLocal(host) {
		return errors.New("an IPv6 zone (%25…) fits only a link-local address (fe80::/10)")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %s is not 1 to 65535", p)
		}
	}
	for i := 0; i < len(u.RawQuery); i++ {
		if u.RawQuery[i] >= utf8.RuneSelf {
			return errors.New("the query holds bytes outside ASCII; percent-encode them")
		}
	}
	return nil
}

// hopByHop are the connection-level headers an http job may not set
// (compared case-insensitively), besides every name starting with "Proxy-":
// they belong to the hop between Sluice and the upstream, which Go's client
// manages.
var hopByHop = []string{"Connection", "Upgrade", "Keep-Alive", "TE", "Trailer", "Transfer-Encoding", "Expect"}

// HopByHop reports whether name is a hop-by-hop header an http job may not
// set: Connection, Upgrade, Keep-Alive, TE, Trailer, Transfer-Encoding,
// Expect or any Proxy-* (Proxy-Authorization, Proxy-Authenticate, …), in any
// case.
func HopByHop(name string) bool {
	if len(name) >= len("Proxy-") && strings.EqualFold(name[:len("Proxy-")], "Proxy-") {
		return true
	}
	return slices.ContainsFunc(hopByHop, func(h string) bool { return strings.EqualFold(h, name) })
}

// CheckHeader checks one header of an http job: the name an RFC 9110
// token and not hop-by-hop (HopByHop), the value free of control characters
// other than tab (CR, LF, NUL, DEL, …: Go's client would refuse to send it)
// and at most 8 KiB. The error lists every problem without naming the field.
// The sender (internal/webhook) applies it again to stored jobs.
func CheckHeader(name, value string) error {
	if p := headerProblems(name, value); len(p) > 0 {
		return errors.New(strings.Join(p, "; "))
	}
	return nil
}

// headerProblems lists what is wrong with one header of an http job.
func headerProblems(name, value string) []string {
	var out []string
	switch {
	case !validHeaderName(name):
		out = append(out, fmt.Sprintf("header name %q is not a valid token", name))
	case HopByHop(name):
		out = append(out, fmt.Sprintf("header %q is hop-by-hop (Connection, Upgrade, Keep-Alive, TE, Trailer, "+
			"Transfer-Encoding, Expect, Proxy-*) and may not be set", name))
	}
	if !validHeaderValue(value) || len(value) > maxHeaderValueLen {
		out = append(out, fmt.Sprintf("value of header %q holds a control character other than tab (CR, LF, NUL, …) "+
			"or is longer than %d bytes", name, maxHeaderValueLen))
	}
	return out
}

// validHeaderValue reports whether value holds only RFC 9110 field-value
// bytes: no control character but HTAB. Go's client refuses to send any
// other ("net/http: invalid header field value").
func validHeaderValue(value string) bool {
	for _, c := range []byte(value) {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// validHeaderName reports whether name is an RFC 9110 token.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range []byte(name) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// linkLocal reports whether host is a link-local IPv6 address (with its
// zone): the only kind a zone selects an interface for.
func linkLocal(host string) bool {
	a, err := netip.ParseAddr(host)
	return err == nil && a.Is6() && (a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast())
}

// depth is how deep arrays and objects nest in the JSON text data (valid
// JSON, or empty: 0).
func depth(data []byte) int {
	d, most, in := 0, 0, false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case in && c == '\\':
			i++
		case in:
			in = c != '"'
		case c == '"':
			in = true
		case c == '[' || c == '{':
			d++
			most = max(most, d)
		case c == ']' || c == '}':
			d--
		}
	}
	return most
}

package bucket

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"pgregory.net/rapid"
)

// member is one parsed member of a RateLimit or RateLimit-Policy list.
type member struct {
	name   string
	params map[string]int64
}

func parseList(t tb, h http.Header, field string) []member {
	t.Helper()
	list, err := httpsfv.UnmarshalList(h.Values(field))
	if err != nil {
		t.Fatalf("%s: %q is not an RFC 9651 list: %v", field, h.Get(field), err)
	}
	var out []member
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("%s: member %v is not an item", field, m)
		}
		name, ok := item.Value.(string)
		if !ok {
			t.Fatalf("%s: member value %v is not an sf-string", field, item.Value)
		}
		params := map[string]int64{}
		for _, k := range item.Params.Names() {
			v, _ := item.Params.Get(k)
			n, ok := v.(int64)
			if !ok {
				t.Fatalf("%s: param %s=%v is not an integer", field, k, v)
			}
			params[k] = n
		}
		out = append(out, member{name, params})
	}
	return out
}

var (
	admitLimit = Limit{Algorithm: TokenBucket, Rate: Rate{Tokens: 100, Per: time.Second}, Burst: 1000}
	apiLimit   = Limit{Algorithm: SlidingWindow, Limit: 1000, Window: time.Minute}
)

func TestWriteHeadersAllowedListsEveryLimit(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	WriteHeaders(h, []Applied{
		{Name: "admit", Limit: admitLimit, Decision: Decision{Allowed: true, Limit: 1000, Remaining: 999, ResetAfter: 10 * time.Millisecond}},
		{Name: "api", Limit: apiLimit, Decision: Decision{Allowed: true, Limit: 1000, Remaining: 990, ResetAfter: 42500 * time.Millisecond}},
	})
	pol := parseList(t, h, HeaderPolicy)
	if len(pol) != 2 || pol[0].name != "admit" || pol[1].name != "api" {
		t.Fatalf("policy members = %+v, want admit then api", pol)
	}
	// bucket: w = ⌈burst / rate⌉ = ⌈1000 / 100⌉ s; window: w = the window.
	if pol[0].params["q"] != 1000 || pol[0].params["w"] != 10 {
		t.Errorf("admit policy = %v, want q=1000 w=10", pol[0].params)
	}
	if pol[1].params["q"] != 1000 || pol[1].params["w"] != 60 {
		t.Errorf("api policy = %v, want q=1000 w=60", pol[1].params)
	}
	st := parseList(t, h, HeaderRateLimit)
	if st[0].params["r"] != 999 || st[0].params["t"] != 1 {
		t.Errorf("admit state = %v, want r=999 t=1 (10ms rounds up)", st[0].params)
	}
	if st[1].params["r"] != 990 || st[1].params["t"] != 43 {
		t.Errorf("api state = %v, want r=990 t=43", st[1].params)
	}
	// The most restrictive is the one with fewer tokens left: api.
	if h.Get(HeaderLimit) != "1000" || h.Get(HeaderRemaining) != "990" || h.Get(HeaderReset) != "43" {
		t.Errorf("X-RateLimit = %s/%s/%s, want 1000/990/43", h.Get(HeaderLimit), h.Get(HeaderRemaining), h.Get(HeaderReset))
	}
	if h.Get(HeaderRetryAfter) != "" {
		t.Errorf("Retry-After = %q on an allowed response", h.Get(HeaderRetryAfter))
	}
}

func TestWriteHeadersRefusedRetryAfterMatchesT(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	WriteHeaders(h, []Applied{
		{Name: "api", Limit: apiLimit, Decision: Decision{Allowed: true, Limit: 1000, Remaining: 5, ResetAfter: 3 * time.Second}},
		{Name: "admit", Limit: admitLimit, Decision: Decision{Allowed: false, Limit: 1000, Remaining: 0, RetryAfter: 2100 * time.Millisecond, ResetAfter: 10 * time.Second}},
	})
	st := parseList(t, h, HeaderRateLimit)
	if st[1].name != "admit" || st[1].params["r"] != 0 || st[1].params["t"] != 3 {
		t.Fatalf("admit state = %+v, want r=0 t=3", st[1])
	}
	if h.Get(HeaderRetryAfter) != "3" {
		t.Errorf("Retry-After = %q, want 3 (= t of the refusing limit)", h.Get(HeaderRetryAfter))
	}
	if h.Get(HeaderRemaining) != "0" || h.Get(HeaderReset) != "3" {
		t.Errorf("X-RateLimit-Remaining/Reset = %s/%s, want the refusing limit's 0/3", h.Get(HeaderRemaining), h.Get(HeaderReset))
	}
}

func TestRetryAfterNeverZero(t *testing.T) {
	t.Parallel()
	for _, wait := range []time.Duration{0, time.Microsecond, 999 * time.Millisecond, time.Second, time.Second + 1} {
		applied := []Applied{{Name: "x", Limit: admitLimit, Decision: Decision{Allowed: false, RetryAfter: wait}}}
		got := RetryAfterSeconds(applied)
		want := max(int64((wait+time.Second-1)/time.Second), 1)
		if got != want {
			t.Errorf("RetryAfterSeconds(wait %s) = %d, want %d", wait, got, want)
		}
		h := http.Header{}
		WriteHeaders(h, applied)
		if st := parseList(t, h, HeaderRateLimit); st[0].params["t"] != got {
			t.Errorf("wait %s: t = %d but Retry-After = %d", wait, st[0].params["t"], got)
		}
	}
}

func TestWriteHeadersEscapesNames(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	WriteHeaders(h, []Applied{{Name: `we"ird\né`, Limit: apiLimit, Decision: Decision{Allowed: true, Limit: 1}}})
	pol := parseList(t, h, HeaderPolicy)
	if pol[0].name != `we"ird\n?` {
		t.Errorf("name round trip = %q", pol[0].name)
	}
}

func TestWriteHeadersEmptyWritesNothing(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	WriteHeaders(h, nil)
	if len(h) != 0 {
		t.Errorf("headers written for no limits: %v", h)
	}
}

// rateLimitT is t of the first member of the RateLimit header and w of the
// first member of RateLimit-Policy.
func rateLimitT(t tb, h http.Header) (tp, w int64) {
	t.Helper()
	return parseList(t, h, HeaderRateLimit)[0].params["t"], parseList(t, h, HeaderPolicy)[0].params["w"]
}

// TestSlidingWindowTNeverExceedsWindow is the probe's case: the API limiter
// (sliding window, 1000 a minute) a few seconds into a window answered
// t=115 for w=60, its reset being the weighted count's return to 0 (up to
// two windows away).
func TestSlidingWindowTNeverExceedsWindow(t *testing.T) {
	t.Parallel()
	f := newFixture(t, apiLimit)
	key := newKey()
	for i, now := range []time.Duration{5 * time.Second, 5 * time.Second, 6 * time.Second, 65 * time.Second, 119 * time.Second} {
		d := f.allowAt(key, 10, at(now))
		if !d.Allowed || d.ResetAfter <= apiLimit.Window {
			t.Fatalf("call %d at %v: %+v, want allowed with a reset beyond the window (the probe's case)", i+1, now, d)
		}
		h := http.Header{}
		WriteHeaders(h, []Applied{{Name: "api", Limit: apiLimit, Decision: d}})
		tp, w := rateLimitT(t, h)
		if w != 60 || tp > w || tp < 1 {
			t.Errorf("call %d at %v (reset %v): t=%d w=%d, want 1 ≤ t ≤ w = 60", i+1, now, d.ResetAfter, tp, w)
		}
		if h.Get(HeaderReset) != itoa(tp) {
			t.Errorf("call %d: X-RateLimit-Reset = %s, want t = %d", i+1, h.Get(HeaderReset), tp)
		}
	}
	// A refusal whose wait is longer than the window: t stops at w,
	// Retry-After keeps the real wait.
	f.allowAt(key, 10, at(121*time.Second))
	d := f.allowAt(key, 1000, at(125*time.Second))
	if d.Allowed || d.RetryAfter <= apiLimit.Window {
		t.Fatalf("cost 1000 after use: %+v, want refused for more than a window", d)
	}
	h := http.Header{}
	WriteHeaders(h, []Applied{{Name: "api", Limit: apiLimit, Decision: d}})
	if tp, w := rateLimitT(t, h); tp != w || h.Get(HeaderRetryAfter) != itoa(ceilSeconds(d.RetryAfter)) {
		t.Errorf("long refusal (wait %v): t=%d w=%d Retry-After=%s, want t = w and Retry-After the whole wait", d.RetryAfter, tp, w, h.Get(HeaderRetryAfter))
	}
}

// TestPropertyTNeverExceedsWindow, for every algorithm on random timelines:
// each decision's t is at most w; a refusal's Retry-After is at least t and
// equals it when the wait fits in the window; an allowed decision's t is its
// reset when that fits in the window.
func TestPropertyTNeverExceedsWindow(t *testing.T) {
	t.Parallel()
	for _, a := range Algorithms {
		t.Run(string(a), func(t *testing.T) {
			t.Parallel()
			s := newShared(t)
			rapid.Check(t, func(rt *rapid.T) {
				l := drawLimit(rt, a)
				f := s.fixture(rt, "lim", l)
				key := newKey()
				window := ceilSeconds(l.PolicyWindow())
				for _, e := range drawTimeline(rt, refill(l)/4, l.Capacity(), 25) {
					d := f.allowAt(key, e.cost, e.at)
					h := http.Header{}
					WriteHeaders(h, []Applied{{Name: "x", Limit: l, Decision: d}})
					tp, w := rateLimitT(rt, h)
					wait := waitSeconds(d)
					retryAfter, _ := strconv.ParseInt(h.Get(HeaderRetryAfter), 10, 64)
					switch {
					case w != window || tp > w:
						rt.Fatalf("at %v: %+v: t=%d w=%d, want t ≤ w = %d", e.at.Sub(epoch), d, tp, w, window)
					case !d.Allowed && (retryAfter < tp || retryAfter != wait):
						rt.Fatalf("at %v: %+v: Retry-After %d, want the whole wait %d ≥ t = %d", e.at.Sub(epoch), d, retryAfter, wait, tp)
					case wait <= w && tp != wait:
						rt.Fatalf("at %v: %+v: t=%d, want the wait %d (it fits in w = %d)", e.at.Sub(epoch), d, tp, wait, w)
					}
				}
			})
		})
	}
}

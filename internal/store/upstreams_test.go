package store

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/upstream"
)

func upCfg(n int64, burst int64) upstream.Config {
	return upstream.Config{Rate: bucket.Rate{Tokens: n, Per: time.Second}, Burst: burst}
}

func (e *env) upstream(name string) quota.UpstreamRecord {
	e.t.Helper()
	rec, err := e.store.Upstream(e.ctx, name)
	if err != nil {
		e.t.Fatalf("get upstream %q: %v", name, err)
	}
	return rec
}

// TestPauseUpstream: a timed pause, a longer one replacing it, a shorter
// one changing nothing, a manual pause until resume that no timed pause
// shortens, resume, a pause ending by time, and the refusals.
func TestPauseUpstream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.store.PutUpstream(e.ctx, "llm", upCfg(10, 1), quota.SourceAPI, ""); err != nil {
		t.Fatal(err)
	}
	state := func() (time.Time, string) {
		rec := e.upstream("llm")
		return rec.PausedUntil, rec.PauseReason
	}
	pause := func(until time.Time, reason string) {
		t.Helper()
		if err := e.store.PauseUpstream(e.ctx, "llm", until, reason); err != nil {
			t.Fatalf("pause until %s (%s): %v", until, reason, err)
		}
	}
	now := e.clock.Now()
	pause(now.Add(30*time.Second), quota.PauseThrottled)
	if u, r := state(); !u.Equal(now.Add(30*time.Second)) || r != quota.PauseThrottled {
		t.Fatalf("after a 30 s pause: %s %q", u, r)
	}
	pause(now.Add(10*time.Second), quota.PauseManual) // shorter: nothing changes
	if u, r := state(); !u.Equal(now.Add(30*time.Second)) || r != quota.PauseThrottled {
		t.Fatalf("a shorter pause changed it: %s %q", u, r)
	}
	pause(now.Add(time.Minute), quota.PauseManual)
	if u, r := state(); !u.Equal(now.Add(time.Minute)) || r != quota.PauseManual {
		t.Fatalf("a longer pause did not extend it: %s %q", u, r)
	}
	pause(time.Time{}, quota.PauseManual)
	rec := e.upstream("llm")
	if !rec.PausedUntilResume() || rec.PauseReason != quota.PauseManual {
		t.Fatalf("manual pause: %+v", rec)
	}
	pause(now.Add(time.Hour), quota.PauseThrottled) // cannot shorten "until resume"
	if rec := e.upstream("llm"); !rec.PausedUntilResume() || rec.PauseReason != quota.PauseManual {
		t.Fatalf("a timed pause shortened the manual one: %+v", rec)
	}
	if err := e.store.ResumeUpstream(e.ctx, "llm"); err != nil {
		t.Fatal(err)
	}
	if u, r := state(); !u.IsZero() || r != "" {
		t.Fatalf("after resume: %s %q", u, r)
	}
	// A pause ends by itself; then a shorter one than the ended one applies.
	pause(e.clock.Now().Add(5*time.Second), quota.PauseThrottled)
	e.clock.Advance(6 * time.Second)
	if u, r := state(); !u.IsZero() || r != "" {
		t.Fatalf("an ended pause still shows: %s %q", u, r)
	}
	pause(e.clock.Now().Add(time.Second), quota.PauseThrottled)
	if u, _ := state(); !u.Equal(e.clock.Now().Add(time.Second)) {
		t.Fatalf("a pause after an ended one: %s", u)
	}
	// A PUT keeps the pause.
	if _, err := e.store.PutUpstream(e.ctx, "llm", upCfg(5, 1), quota.SourceAPI, ""); err != nil {
		t.Fatal(err)
	}
	if u, _ := state(); !u.Equal(e.clock.Now().Add(time.Second)) {
		t.Fatalf("a PUT changed the pause: %s", u)
	}
	// Refusals change nothing.
	for _, err := range []error{
		e.store.PauseUpstream(e.ctx, "llm", e.clock.Now(), quota.PauseManual),
		e.store.PauseUpstream(e.ctx, "llm", e.clock.Now().Add(time.Hour), "bored"),
		e.store.PauseUpstream(e.ctx, "a:b", time.Time{}, quota.PauseManual),
		e.store.ResumeUpstream(e.ctx, ""),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("bad pause: %v, want ErrInvalid", err)
		}
	}
	if u, _ := state(); !u.Equal(e.clock.Now().Add(time.Second)) {
		t.Fatalf("a refused pause changed it: %s", u)
	}
	for _, err := range []error{
		e.store.PauseUpstream(e.ctx, "ghost", time.Time{}, quota.PauseManual),
		e.store.ResumeUpstream(e.ctx, "ghost"),
	} {
		if !errors.Is(err, quota.ErrUpstreamNotFound) {
			t.Errorf("pause of an unknown upstream: %v, want quota.ErrUpstreamNotFound", err)
		}
	}
	if n, _ := e.rdb.Exists(e.ctx, e.store.UpstreamKey("ghost")).Result(); n != 0 {
		t.Error("pausing an unknown upstream created its hash")
	}
	e.requireConsistent()
}

// TestSeedUpstreams: the file creates upstreams (src config), follows its
// own changes at the next start, leaves an unchanged one at its version,
// and keeps one last written by PUT (logging a warning); an invalid entry
// writes nothing at all.
func TestSeedUpstreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	seed := func(cfgs map[string]upstream.Config) {
		t.Helper()
		if err := e.store.SeedUpstreams(e.ctx, cfgs, log); err != nil {
			t.Fatal(err)
		}
	}
	seed(map[string]upstream.Config{"a": upCfg(10, 1), "b": upCfg(20, 2)})
	if a := e.upstream("a"); a.Version != 1 || a.Source != quota.SourceConfig || a.Config.Rate.Tokens != 10 {
		t.Fatalf("seeded a = %+v", a)
	}
	if _, err := e.store.PutUpstream(e.ctx, "b", upCfg(99, 9), quota.SourceAPI, "1"); err != nil {
		t.Fatal(err)
	}
	seed(map[string]upstream.Config{"a": upCfg(10, 1), "b": upCfg(20, 2)}) // a unchanged, b kept
	if a := e.upstream("a"); a.Version != 1 {
		t.Errorf("an unchanged seed bumped a to %d", a.Version)
	}
	if b := e.upstream("b"); b.Version != 2 || b.Source != quota.SourceAPI || b.Config.Rate.Tokens != 99 {
		t.Errorf("the seed overwrote b's PUT: %+v", b)
	}
	if !strings.Contains(logs.String(), "keeping Redis's") || !strings.Contains(logs.String(), "upstream=b") {
		t.Errorf("no warning for b: %s", logs.String())
	}
	seed(map[string]upstream.Config{"a": upCfg(15, 1)}) // the file changed a
	if a := e.upstream("a"); a.Version != 2 || a.Config.Rate.Tokens != 15 || a.Source != quota.SourceConfig {
		t.Errorf("the file's change of a: %+v", a)
	}
	err := e.store.SeedUpstreams(e.ctx, map[string]upstream.Config{"c": upCfg(1, 1), "d": {}}, log)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"d"`) {
		t.Errorf("seed with an invalid entry: %v", err)
	}
	if _, err := e.store.Upstream(e.ctx, "c"); !errors.Is(err, quota.ErrUpstreamNotFound) {
		t.Errorf("an invalid seed wrote c: %v", err)
	}
	names, _ := e.store.UpstreamNames(e.ctx, "", 10)
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("listing = %v", names)
	}
	e.requireConsistent()
	// The audit sees an unlisted hash (a listing write that failed).
	if err := e.rdb.ZRem(e.ctx, e.store.ListingKey(), "a").Err(); err != nil {
		t.Fatal(err)
	}
	problems, err := auditKeyspace(e.ctx, e.rdb, e.prefix, e.store.Shards())
	if err != nil || len(problems) != 1 || !strings.Contains(problems[0], `"a" has a hash but is not in the listing`) {
		t.Errorf("audit of an unlisted upstream: %q, %v", problems, err)
	}
	seed(map[string]upstream.Config{"a": upCfg(15, 1)}) // the next seed lists it again
	e.requireConsistent()
}

// TestPolicyDefaultUpstreams: a tenant policy's default upstreams are
// stored in the policy JSON like result_headers and merged "*" ← tenant by
// TenantPolicy (what the API resolves enqueues with): an empty tenant list
// names none over the defaults'; out-of-rule lists are refused.
func TestPolicyDefaultUpstreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.Upstreams = HeaderList{"shared"} }))
	effective := func(tenant string) []string {
		t.Helper()
		rec, err := e.store.TenantPolicy(e.ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Effective.Upstreams
	}
	if got := effective("plain"); !slices.Equal(got, []string{"shared"}) {
		t.Errorf("defaults' upstreams = %v", got)
	}
	if _, err := e.store.PutTenantPolicy(e.ctx, "acme", Overrides{Upstreams: HeaderList{"sms", "llm"}}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	if got := effective("acme"); !slices.Equal(got, []string{"sms", "llm"}) {
		t.Errorf("acme's upstreams = %v", got)
	}
	if _, err := e.store.PutTenantPolicy(e.ctx, "none", Overrides{Upstreams: HeaderList{}}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	if got := effective("none"); got != nil {
		t.Errorf("an empty list over the defaults' = %#v, want nil (none)", got)
	}
	for _, bad := range []HeaderList{{"a", "b", "c", "d", "e"}, {"x", "x"}, {"a:b"}} {
		if _, err := e.store.PutTenantPolicy(e.ctx, "acme", Overrides{Upstreams: bad}, AnyVersion); !errors.Is(err, ErrInvalid) {
			t.Errorf("upstreams %q: %v, want ErrInvalid", bad, err)
		}
	}
	if got := effective("acme"); !slices.Equal(got, []string{"sms", "llm"}) {
		t.Errorf("a refused PUT changed acme's upstreams: %v", got)
	}
}

// TestTenantViewShowsDefaultUpstreams: the tenant view (TenantState,
// TenantViews: GET /v1/tenants/{t}, the listing, the console's edit form)
// shows the policy's default upstreams as TenantPolicy merges them.
func TestTenantViewShowsDefaultUpstreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.Upstreams = HeaderList{"shared"} }))
	if _, err := e.store.PutTenantPolicy(e.ctx, "acme", Overrides{Upstreams: HeaderList{"sms", "llm"}}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.PutTenantPolicy(e.ctx, "none", Overrides{Upstreams: HeaderList{}}, AnyVersion); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"acme": {"sms", "llm"}, "none": nil, "plain": {"shared"}}
	for tenant, w := range want {
		if got := e.state(tenant).Policy.Upstreams; !slices.Equal(got, w) {
			t.Errorf("%s: TenantState upstreams = %v, want %v", tenant, got, w)
		}
	}
	views, err := e.store.TenantViews(e.ctx, []string{"acme", "none", "plain"}) // plain has no state: no view
	if err != nil || len(views) != 2 {
		t.Fatalf("TenantViews: %d views, %v", len(views), err)
	}
	for _, st := range views {
		if !slices.Equal(st.Policy.Upstreams, want[st.Tenant]) {
			t.Errorf("%s: TenantViews upstreams = %v, want %v", st.Tenant, st.Policy.Upstreams, want[st.Tenant])
		}
	}
}

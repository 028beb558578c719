package store

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/plan"
)

// tenantPacked lists the fields lib.lua packs into a tenant hash's field s,
// in order (lib.lua T_FIELDS): package plan's, which the test helpers
// decode with.
var tenantPacked = plan.FieldNames[:]

// tenantFields expands a tenant hash as HGETALL returns it into its fields
// as the scripts read them: field s unpacked (plan.Decode: the fields past
// a shorter s, whose trailing zeros lib.lua trims, read as 0), then any
// field stored under its own name over it. Fields absent from both stay
// absent. ok is false when s is not whole doubles or too long.
func tenantFields(h map[string]string) (fields map[string]string, ok bool) {
	fields = map[string]string{}
	if s, has := h["s"]; has {
		st, err := plan.Decode([]byte(s))
		if err != nil {
			return nil, false
		}
		for i, v := range st.Fields() {
			fields[tenantPacked[i]] = strconv.FormatFloat(*v, 'f', -1, 64)
		}
	}
	for f, v := range h {
		if f != "s" {
			fields[f] = v
		}
	}
	foldFastFinishes(fields)
	return fields, true
}

// foldFastFinishes applies the fast finishes taken since the tenant's last
// save to its fields, as lib.lua T_FIELDS.fold does at a load (plan.Fold):
// running less f0 − ff, and fw 0 once the last token (D > 0) dropped the
// held weight.
func foldFastFinishes(fields map[string]string) {
	num := func(f string) (float64, bool) { // absent: 0
		if fields[f] == "" {
			return 0, true
		}
		n, err := strconv.ParseFloat(fields[f], 64)
		return n, err == nil
	}
	f0, ok0 := num("f0")
	ff, ok1 := num("ff")
	running, ok2 := num("running")
	fw, ok3 := num("fw")
	if !ok0 || !ok1 || !ok2 || !ok3 {
		return
	}
	st := plan.Tenant{Running: running, FW: fw}
	plan.Fold(&st, f0, ff)
	if st.Running != running {
		fields["running"] = strconv.FormatFloat(st.Running, 'f', -1, 64)
	}
	if st.FW != fw {
		fields["fw"] = "0"
	}
}

// tenantField reads one of tenant's fields as the scripts would (0 when absent).
func (e *env) tenantField(tenant, field string) int64 {
	e.t.Helper()
	h, err := e.rdb.HGetAll(e.ctx, e.store.keys.tenant(tenant)).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	fields, ok := tenantFields(h)
	if !ok {
		e.t.Fatalf("tenant %q: field s of %d bytes", tenant, len(h["s"]))
	}
	if fields[field] == "" {
		return 0
	}
	v, err := strconv.ParseInt(fields[field], 10, 64)
	if err != nil {
		e.t.Fatalf("tenant %q field %s: %v", tenant, field, err)
	}
	return v
}

// addTenantField adds by to one of tenant's fields, writing it under its own
// name (which the scripts read over field s, and fold into it at their save).
func (e *env) addTenantField(tenant, field string, by int64) {
	e.t.Helper()
	v := e.tenantField(tenant, field) + by
	if err := e.rdb.HSet(e.ctx, e.store.keys.tenant(tenant), field, v).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// The Go twin of T_FIELDS matches lib.lua's.
func TestTenantPackedFieldsMatchLua(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("lua/lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)local T_FIELDS = \{(.*?)\}`).FindSubmatch(src)
	if m == nil {
		t.Fatal("lib.lua: no T_FIELDS")
	}
	var lua []string
	for _, q := range regexp.MustCompile(`'([a-z_0-9]+)'`).FindAllStringSubmatch(string(m[1]), -1) {
		lua = append(lua, q[1])
	}
	if !slices.Equal(lua, tenantPacked) {
		t.Fatalf("lib.lua T_FIELDS %s, tenantPacked %s", strings.Join(lua, ","), strings.Join(tenantPacked, ","))
	}
	if m := regexp.MustCompile(`local T_PACK = '<(d*)'`).FindSubmatch(src); m == nil || len(m[1]) != len(tenantPacked) {
		t.Fatalf("lib.lua T_PACK: %q, want %d doubles", m, len(tenantPacked))
	}
	// tenant_of and pack_tenant write the list out.
	names := func(re, text string) []string {
		m := regexp.MustCompile(re).FindStringSubmatch(string(src))
		if m == nil {
			t.Fatalf("lib.lua: no %s", text)
		}
		return strings.FieldsFunc(m[1], func(r rune) bool { return r == ',' || r == ' ' || r == '\n' })
	}
	if got := names(`(?s)local function tenant_of\(s\)\s*local (.*?) = struct\.unpack`, "tenant_of"); !slices.Equal(got, tenantPacked) {
		t.Fatalf("tenant_of unpacks %v", got)
	}
	var fields []string
	for _, f := range names(`(?s)return struct\.pack\(T_FIELDS\.fmt\[T_FIELDS\.used\(t\)\], (.*?)\)`, "pack_tenant") {
		fields = append(fields, strings.TrimPrefix(f, "t."))
	}
	if !slices.Equal(fields, tenantPacked) {
		t.Fatalf("pack_tenant packs %v", fields)
	}
	m = regexp.MustCompile(`(?s)local function tenant_of.*?return \{(.*?)\}`).FindSubmatch(src)
	var ctor []string
	for _, kv := range regexp.MustCompile(`([a-z_0-9]+) = ([a-z_0-9]+)`).FindAllSubmatch(m[1], -1) {
		if string(kv[2]) == "nil" && strings.HasPrefix(string(kv[1]), "st_") {
			continue // what load_tenant remembers, sized in
		}
		if string(kv[1]) != string(kv[2]) {
			t.Fatalf("tenant_of sets %s = %s", kv[1], kv[2])
		}
		ctor = append(ctor, string(kv[1]))
	}
	if !slices.Equal(ctor, tenantPacked) {
		t.Fatalf("tenant_of returns %v", ctor)
	}
	// A reused table (T_FIELDS.pool) gets every value of T_FIELDS.
	m = regexp.MustCompile(`(?s)local function tenant_of.*?pool\[#pool\] = nil(.*?)return t\n`).FindSubmatch(src)
	if m == nil {
		t.Fatal("lib.lua: no reuse in tenant_of")
	}
	var reused []string
	for _, kv := range regexp.MustCompile(`t\.([a-z_0-9]+) = ([a-z_0-9]+)`).FindAllSubmatch(m[1], -1) {
		if string(kv[1]) != string(kv[2]) {
			t.Fatalf("tenant_of reuses with t.%s = %s", kv[1], kv[2])
		}
		reused = append(reused, string(kv[1]))
	}
	if !slices.Equal(reused, tenantPacked) {
		t.Fatalf("tenant_of reuses with %v", reused)
	}
}

// Every key a script sets on a tenant table (t or c.t) is one of those
// tenant_of's constructor sizes in, so a table reused from an earlier call
// (lib.lua T_FIELDS.pool) holds no key a new one would not.
func TestTenantTableKeysAreTheConstructors(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("lua/lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)local function tenant_of.*?return \{(.*?)\}`).FindSubmatch(src)
	if m == nil {
		t.Fatal("lib.lua: no tenant_of")
	}
	keys := map[string]bool{}
	for _, k := range regexp.MustCompile(`([a-z_0-9]+) = `).FindAllSubmatch(m[1], -1) {
		keys[string(k[1])] = true
	}
	files, err := filepath.Glob("lua/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("lua/*.lua: %v", err)
	}
	lhs := regexp.MustCompile(`^\s*((?:[\w.\[\]#+ ]+,\s*)*[\w.\[\]#+ ]+?)\s*=[^=]`)
	target := regexp.MustCompile(`^(?:c\.)?t\.([a-z_0-9]+)$`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(b), "\n") {
			for _, stmt := range strings.Split(line, ";") {
				m := lhs.FindStringSubmatch(stmt)
				if m == nil {
					continue
				}
				for _, x := range strings.Split(m[1], ",") {
					if k := target.FindStringSubmatch(strings.TrimSpace(x)); k != nil && !keys[k[1]] {
						t.Errorf("%s:%d sets t.%s, not a key of tenant_of's constructor", f, n+1, k[1])
					}
				}
			}
		}
	}
}

// toNamedFields rewrites tenant's hash as the scripts wrote it before field
// s: every field under its own name, as integers (a rolling upgrade finds
// tenants so), keeping its TTL.
func (e *env) toNamedFields(tenant string) {
	e.t.Helper()
	key := e.store.keys.tenant(tenant)
	h, err := e.rdb.HGetAll(e.ctx, key).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	fields, ok := tenantFields(h)
	if !ok || h["s"] == "" {
		e.t.Fatalf("tenant %q not packed: %v", tenant, h)
	}
	args := []any{"rs", "1234567890123"} // a digest as the scripts wrote it then: an integer
	for _, f := range tenantPacked {
		args = append(args, f, fields[f])
	}
	if err := e.rdb.HDel(e.ctx, key, "s").Err(); err != nil {
		e.t.Fatal(err)
	}
	if err := e.rdb.HSet(e.ctx, key, args...).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// A tenant stored field by field (before the packed field s) is read as it
// was written and migrated at its first save: two tenants taken through the
// same steps, one of them rewritten field by field midway, end in the same
// state, and the rewritten one's hash holds fields s, rs (a new digest) and ra
// (its recent attempts) only.
func TestTenantNamedFieldsReadAndMigrated(t *testing.T) {
	t.Parallel()
	e := newEnvShards(t, 1)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency, p.AdmitBurst = 100_000, 2, 3, 20 }))
	tenants := []string{"acme", "globex"}
	steps := func(k int) {
		for _, tn := range tenants {
			e.enqueue(tn, item(fmt.Sprintf(`{"k":%d}`, k)), item(`{"x":1}`))
		}
		rel := e.pass(0, PassConfig{Lead: 90 * ms, MinLead: 50 * ms, Grace: time.Second, Capacity: -1}).Released
		if len(rel) == 0 {
			t.Fatalf("step %d released nothing", k)
		}
		e.clock.Set(rel[len(rel)-1].SendAt)
		for _, r := range rel {
			if c := e.claim(r.ID, r.Gen); c.Outcome == ClaimOK {
				e.finish(r.ID, r.Gen, benchOK, FinishConfig{})
			}
		}
		e.clock.Advance(120 * ms)
	}
	same := func(when string) {
		a, g := e.state("acme"), e.state("globex")
		a.NextAt, g.NextAt = time.Time{}, time.Time{} // the pass orders them by name at equal vt
		a.Tenant, g.Tenant = "", ""
		if !reflect.DeepEqual(a, g) {
			t.Fatalf("%s: acme %+v\nglobex %+v", when, a, g)
		}
	}
	steps(1)
	same("before the rewrite")
	e.toNamedFields("acme")
	same("rewritten field by field")
	steps(2)
	steps(3)
	same("after more steps")
	h := e.rdb.HGetAll(e.ctx, e.store.keys.tenant("acme")).Val()
	delete(h, "f0") // the fast finishes' tokens (lib.lua T_FIELDS.mint)
	delete(h, "ff")
	if len(h) != 2 || h["s"] == "" || h["rs"] == "1234567890123" { // the recent attempts have a key of their own
		t.Fatalf("acme not migrated: fields %v", slices.Sorted(maps.Keys(h)))
	}
	e.requireConsistent()
}

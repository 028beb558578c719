package store

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/internal/plan"
	"github.com/sluicehq/sluice/internal/redistest"
)

// planDiffBody runs lib.lua's tenant codec and rules on the cases of its
// ARGV and replies, for each, what they give (planDiff's row). ARGV[3] is
// the number of cases; each case is planDiffArgs values: the state s, now,
// the policy's rate_us, burst, concurrency, weight, adaptive, pacing, then a
// job's cost c, a lead, λ, a slot and the fast-finish fields f0 and ff.
// Numbers go back as %.17g text (a Lua number in a reply is truncated to an
// integer). The rules that change the state run in turn on one tenant —
// PACE.take, fold, rescale_tat, refactor — and its packed state follows
// each.
const planDiffBody = `
local function num(v) return string.format('%.17g', v) end
local function case(a, i)
  local s = a[i]
  NOW = tonumber(a[i + 1])
  local p = {rate_us = tonumber(a[i + 2]), burst = tonumber(a[i + 3]), concurrency = tonumber(a[i + 4]),
    weight = tonumber(a[i + 5]), adaptive = tonumber(a[i + 6]), pacing = tonumber(a[i + 7])}
  local c, lead, lv, slot = tonumber(a[i + 8]), tonumber(a[i + 9]), tonumber(a[i + 10]), tonumber(a[i + 11])
  local f0, ff = tonumber(a[i + 12]), tonumber(a[i + 13])
  if #s < #T_ZERO then s = s .. string.sub(T_ZERO, #s + 1) end
  local t = tenant_of(s)
  local row = {}
  for _, f in ipairs(T_FIELDS) do row[#row + 1] = num(t[f]) end
  row[#row + 1] = pack_tenant(t)
  FAIR.lv = nil
  if lv > 0 then FAIR.lv = lv end
  row[#row + 1] = num(interval(t, p))
  row[#row + 1] = num(earliest(t, p, c, NOW))
  row[#row + 1] = num(gate(t))
  row[#row + 1] = num(release_cap(t, p, lead))
  row[#row + 1] = num(SIG.BLOCKED[blocked(t, p)] or 0)
  local st = send_target(t, slot)
  row[#row + 1] = st and num(st) or ''
  row[#row + 1] = num(PACE.slot(t, p, c))
  local sig, code = sched_sig(t, p)
  row[#row + 1] = sig
  row[#row + 1] = num(code)
  PACE.take(t, p, slot, c)
  row[#row + 1] = pack_tenant(t)
  T_FIELDS.fold(t, f0, ff)
  row[#row + 1] = pack_tenant(t)
  rescale_tat(t, p, NOW)
  row[#row + 1] = pack_tenant(t)
  t.rf = tonumber(a[i + 14])
  refactor(t, p, NOW)
  row[#row + 1] = pack_tenant(t)
  return row
end
local out, n = {}, tonumber(ARGV[3])
for k = 0, n - 1 do out[#out + 1] = case(ARGV, 4 + k * 15) end
return out
`

// planDiffCase is one case of the differential test: a state, a policy and
// the rules' other arguments.
type planDiffCase struct {
	t                       plan.Tenant
	p                       plan.Policy
	now, c, lead, lambda    float64
	slot, f0, ff, refactorf float64
}

func (k planDiffCase) args() []any {
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return []any{string(k.t.Encode()), f(k.now), f(k.p.RateUS), f(k.p.Burst), f(k.p.Concurrency), f(k.p.Weight),
		b(k.p.Adaptive), b(k.p.Pacing), f(k.c), f(k.lead), f(k.lambda), f(k.slot), f(k.f0), f(k.ff), f(k.refactorf)}
}

// row is what package plan gives for the case, in planDiffBody's order.
func (k planDiffCase) row() []string {
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', 17, 64) }
	t, err := plan.Decode(k.t.Encode()) // as the script reads it: a trailing −0 is left out, so 0
	if err != nil {
		return []string{err.Error()}
	}
	p := k.p
	var row []string
	for _, f := range t.Fields() {
		row = append(row, num(*f))
	}
	row = append(row, string(t.Encode()))
	row = append(row, num(plan.Interval(&t, &p)), num(plan.Earliest(&t, &p, k.c, k.now)), num(plan.Gate(&t)),
		num(plan.ReleaseCap(&t, &p, k.lead)), num(float64(plan.Blocked(&t, &p, k.lambda))))
	if st, ok := plan.SendTarget(&t, k.slot); ok {
		row = append(row, num(st))
	} else {
		row = append(row, "")
	}
	row = append(row, num(plan.PaceSlot(&t, &p, k.c, k.now)))
	sig, code := plan.SchedSig(&t, &p, k.lambda, k.now)
	row = append(row, string(sig), num(float64(code)))
	plan.PaceTake(&t, &p, k.slot, k.c, k.now)
	row = append(row, string(t.Encode()))
	plan.Fold(&t, k.f0, k.ff)
	row = append(row, string(t.Encode()))
	plan.RescaleTAT(&t, &p, k.now)
	row = append(row, string(t.Encode()))
	t.RF = k.refactorf
	plan.Refactor(&t, &p, k.now)
	return append(row, string(t.Encode()))
}

// planDiffNames names the row's values for a failure's message.
var planDiffNames = func() []string {
	names := append([]string{}, plan.FieldNames[:]...)
	return append(names, "packed", "interval", "earliest", "gate", "release_cap", "blocked", "send_target",
		"pace_slot", "sched_sig", "sched_sig code", "after PACE.take", "after fold", "after rescale_tat", "after refactor")
}()

// TestPlanMatchesLua runs package plan's codec and rules beside lib.lua's
// on random states, policies and arguments, on a real Redis: every value
// and every packed state must be the same, bit for bit.
func TestPlanMatchesLua(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	base := prefix + ":{s0}:"
	src := "local KEYS, ARGV = KEYS, ARGV\n" + prologue() +
		"do local err = begin() if err then return err end end\n" + planDiffBody
	ctx := context.Background()
	rapid.Check(t, func(rt *rapid.T) {
		cases := rapid.SliceOfN(planDiffGen(), 1, 64).Draw(rt, "cases")
		args := []any{base, "0", strconv.Itoa(len(cases))}
		for _, k := range cases {
			args = append(args, k.args()...)
		}
		reply, err := rdb.Eval(ctx, src, []string{base + "ready"}, args...).Slice()
		if err != nil {
			rt.Fatalf("eval: %v", err)
		}
		if len(reply) != len(cases) {
			rt.Fatalf("%d rows for %d cases", len(reply), len(cases))
		}
		for i, k := range cases {
			lua, ok := reply[i].([]any)
			want := k.row()
			if !ok || len(lua) != len(want) {
				rt.Fatalf("case %d: Lua's row %v, want %d values", i, reply[i], len(want))
			}
			for j, w := range want {
				if got := fmt.Sprint(lua[j]); !planSame(got, w) {
					rt.Fatalf("case %d (%+v): %s is %q in Lua, %q in plan", i, k, planDiffNames[j], got, w)
				}
			}
		}
	})
}

// planSame compares a Lua value with plan's: numbers by their bits (Lua's
// %.17g and Go's text differ in form, as 1e+15 and 1000000000000000),
// packed states byte for byte.
func planSame(lua, gov string) bool {
	b, errB := strconv.ParseFloat(gov, 64)
	if (lua == "nan" || lua == "-nan") && errB == nil {
		return math.IsNaN(b) // the sign a C library prints a NaN with is its own
	}
	a, errA := strconv.ParseFloat(lua, 64)
	if errA == nil && errB == nil {
		return math.Float64bits(a) == math.Float64bits(b)
	}
	return bytes.Equal([]byte(lua), []byte(gov))
}

// planDiffGen draws a case: each field of the state 0, a small count, a
// time near now (before or after it), an interval, or a fraction; a
// policy and arguments of the same kinds, fast-finish fields F + D·K + S·K²
// (ff also −1: a take that found no token).
func planDiffGen() *rapid.Generator[planDiffCase] {
	const now0 = 1772366400000000 // 2026-03-01 12:00 UTC in µs
	return rapid.Custom(func(rt *rapid.T) planDiffCase {
		now := float64(now0 + rapid.Int64Range(-1e6, 1e6).Draw(rt, "now"))
		val := func(label string) float64 {
			switch rapid.IntRange(0, 5).Draw(rt, label+" kind") {
			case 0:
				return 0
			case 1:
				return float64(rapid.IntRange(1, 5).Draw(rt, label))
			case 2:
				return now + float64(rapid.Int64Range(-5e7, 5e7).Draw(rt, label))
			case 3:
				return float64(rapid.Int64Range(1, 1e8).Draw(rt, label))
			case 4:
				return float64(rapid.IntRange(1, plan.RFFull).Draw(rt, label))
			default:
				return float64(rapid.IntRange(-1e6, 1e9).Draw(rt, label)) / 1000
			}
		}
		var k planDiffCase
		for i, f := range k.t.Fields() {
			*f = val(plan.FieldNames[i])
		}
		k.now = now
		k.p = plan.Policy{
			RateUS:      float64(rapid.SampledFrom([]int64{1, 1000, 20000, 1000000, 86400000000}).Draw(rt, "rate_us")),
			Burst:       float64(rapid.IntRange(0, 20).Draw(rt, "burst")),
			Concurrency: float64(rapid.IntRange(1, 100).Draw(rt, "concurrency")),
			Weight:      float64(rapid.IntRange(1, 1000).Draw(rt, "weight")),
			Adaptive:    rapid.Bool().Draw(rt, "adaptive"),
			Pacing:      rapid.Bool().Draw(rt, "pacing"),
		}
		k.c = float64(rapid.IntRange(1, 5).Draw(rt, "c"))
		k.lead = val("lead")
		k.lambda = float64(rapid.SampledFrom([]int{0, 0, 1, 150, 1000, 2500}).Draw(rt, "lambda"))
		k.slot = val("slot")
		ff := func(label string) float64 {
			return float64(rapid.IntRange(0, 5).Draw(rt, label+" F")) +
				float64(rapid.IntRange(0, 3).Draw(rt, label+" D"))*plan.FFK +
				float64(rapid.IntRange(0, 1).Draw(rt, label+" S"))*plan.FFK*plan.FFK
		}
		k.f0 = ff("f0")
		k.ff = ff("ff")
		if rapid.IntRange(0, 4).Draw(rt, "ff none") == 0 {
			k.ff = -1
		}
		k.refactorf = float64(rapid.SampledFrom([]int{0, 1, 500000, 999999, plan.RFFull}).Draw(rt, "refactor rf"))
		return k
	})
}

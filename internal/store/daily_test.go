package store

import (
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/redisscript"
)

// dayUS is one day in µs.
const dayUS = int64(bucket.Day / time.Microsecond)

// ceilDiv is ⌈a / b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// A tenant at N/d with burst b and a backlog, passed at every NextWake like
// the dispatcher does, on the fake clock over several days: every job is
// released once at GCRA's slot; any window [sᵢ, sⱼ] holds at most b +
// ⌊(sⱼ − sᵢ)/T⌋ tokens, so any 24 h window at most b + N; and once the
// burst is spent, every 24 h window from a slot holds exactly N (6T < a day
// < 7T for 7/d: T = ⌈day / 7⌉).
func TestDailyRateIsExactOverTheDay(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		tokens, burst int64
		days          int64
	}{{7, 3, 4}, {1, 1, 4}, {24, 2, 3}} {
		t.Run(fmt.Sprintf("%d/d burst %d", c.tokens, c.burst), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			T := ceilDiv(dayUS, c.tokens)
			e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Concurrency, p.Adaptive = T, c.burst, 1000, 0 }))
			jobs := int(c.burst + c.days*c.tokens)
			e.enqueue("acme", batchOf(jobs, "d")...)
			s := newSim(e, "acme", prodPass)
			for at := epoch; len(s.released) < jobs; {
				res := s.passAt(at)
				if res.NextWake.IsZero() {
					t.Fatalf("after %d releases nothing is due", len(s.released))
				}
				at = res.NextWake
				if !at.After(e.clock.Now()) {
					at = e.clock.Now().Add(time.Millisecond)
				}
			}
			s.runUntil(s.released[len(s.released)-1].Slot.Add(time.Second))
			if s.finished != jobs {
				t.Fatalf("%d of %d jobs finished", s.finished, jobs)
			}
			slots := s.slots()
			if v := gcraViolation(slots, c.burst, redisscript.Micros(T)); v != "" {
				t.Fatal(v)
			}
			for i := range slots {
				n := int64(0)
				for j := i; j < len(slots) && slots[j].Sub(slots[i]) < bucket.Day; j++ {
					n++
				}
				if n > c.burst+c.tokens {
					t.Fatalf("%d tokens in the day from +%s, bound b + N = %d", n, slots[i].Sub(epoch), c.burst+c.tokens)
				}
				if full := i+int(c.tokens) < len(slots); i >= int(c.burst) && full && n != c.tokens {
					t.Fatalf("steady state: %d tokens in the day from +%s, want exactly %d", n, slots[i].Sub(epoch), c.tokens)
				}
			}
			if last, want := slots[len(slots)-1].Sub(epoch), redisscript.Micros(c.days*c.tokens*T); last != want {
				t.Fatalf("last slot at +%s, want +%s (b at once, then T = %d µs apart)", last, want, T)
			}
			e.requireConsistent()
		})
	}
}

// An idle tenant at 1/d keeps its hash (its TAT) until its TAT has passed:
// expiring it earlier would hand out a free token.
func TestDailyTenantHashOutlivesItsTAT(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(params(func(p *Params) { p.RateUS, p.Burst, p.Adaptive = dayUS, 1, 0 }))
	e.enqueueOne("acme", item(`{}`))
	r, ok := e.pop("acme", 100*ms)
	if !ok {
		t.Fatal("nothing released")
	}
	c := e.claimAt(r)
	e.finish(r.ID, c.Gen, benchOK, FinishConfig{})
	st := e.state("acme")
	if want := r.Slot.Add(bucket.Day); !st.TAT.Equal(want) {
		t.Fatalf("TAT +%s, want +%s", st.TAT.Sub(epoch), want.Sub(epoch))
	}
	ttl, err := e.rdb.PTTL(e.ctx, e.store.keys.tenant("acme")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if left := st.TAT.Sub(e.clock.Now()); ttl < left || ttl > left+2*time.Second {
		t.Fatalf("tenant hash PTTL %s, want its TAT's %s (+ about 1 s)", ttl, left)
	}
}

// An adaptive tenant at a daily rate: T_eff = ⌈T·10⁶ / f⌉ exactly, although
// T·10⁶ is beyond doubles' exact integers (lib.lua interval; the plain
// quotient was 1 µs short at 1/d and f = 61 138 ppm).
func TestAdaptiveIntervalAtDailyRates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i, c := range []struct{ rateUS, rf int64 }{
		{dayUS, 56_231}, {dayUS, 61_138}, {ceilDiv(dayUS, 7), 999_999}, {ceilDiv(dayUS, 3), 50_001}, {3_600_000_000, 777_777},
	} {
		tn := fmt.Sprintf("t%d", i)
		if _, err := e.store.PutTenantPolicy(e.ctx, tn, Overrides{RateUS: &c.rateUS, Adaptive: ptr(1)}, AnyVersion); err != nil {
			t.Fatal(err)
		}
		e.enqueueOne(tn, item(`{}`))
		if err := e.rdb.HSet(e.ctx, e.store.keys.tenant(tn), "rf", c.rf).Err(); err != nil {
			t.Fatal(err)
		}
		n := new(big.Int).Mul(big.NewInt(c.rateUS), big.NewInt(RateFactorFull))
		q, m := new(big.Int).DivMod(n, big.NewInt(c.rf), new(big.Int))
		if m.Sign() > 0 {
			q.Add(q, big.NewInt(1))
		}
		if got := e.state(tn).IntervalUS; got != q.Int64() {
			t.Errorf("T = %d µs at f = %d ppm: T_eff %d, want ⌈T·10⁶ / f⌉ = %s", c.rateUS, c.rf, got, q)
		}
	}
}

// The drain forecast of a long backlog at a daily rate: N jobs at 1/d
// leave over N − b days; one that would overflow a Duration says the
// longest one instead of a negative or wrapped ETA.
func TestForecastAtDailyRates(t *testing.T) {
	t.Parallel()
	st := TenantState{Now: epoch, TAT: epoch, QueuedCost: 1000, Queued: 1000, Backlog: 1000, IntervalUS: dayUS}
	st.Policy.Burst = 1
	if f := st.Forecast(); !f.DrainKnown || f.DrainETA != 999*bucket.Day {
		t.Fatalf("1000 jobs at 1/d: forecast %+v, want 999 days", f)
	}
	st.QueuedCost, st.Queued, st.Backlog = 1_000_000_000, 1_000_000_000, 1_000_000_000
	if f := st.Forecast(); f.DrainETA != time.Duration(maxDurationUS)*time.Microsecond {
		t.Fatalf("10⁹ jobs at 1/d: forecast %s, want the longest Duration", f.DrainETA)
	}
}

// Admission at a daily rate: admit 2/d with admit burst 1 accepts one job,
// refuses the next with the wait until the token refills (12 h), accepts
// it then; the idle tenant's hash lives until its bucket is full again.
func TestDailyAdmission(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	half := ceilDiv(dayUS, 2)
	e.seed(params(func(p *Params) { p.AdmitUS, p.AdmitBurst = half, 1 }))
	e.enqueueOne("acme", item(`{"n":1}`))
	e.clock.Advance(time.Hour)
	r := e.enqueue("acme", item(`{"n":2}`))[0]
	if r.Outcome == Accepted || r.Code != CodeRateLimited || r.RetryAfter != 11*time.Hour {
		t.Fatalf("second job an hour later: %+v, want refused rate_limited, retry after 11h", r)
	}
	e.clock.Advance(11 * time.Hour)
	e.enqueueOne("acme", item(`{"n":3}`))
}

// A backlog_full wait at 1/d can pass a Duration's range: enqueue.lua's
// drain_wait is up to (queued jobs)·T, 1.07·10⁵ jobs at a day each already
// 9.2·10¹⁵ µs. Result.RetryAfter then says the longest Duration, not a
// wrapped negative one (which the API would have turned into 1 s).
func TestMicrosSatDoesNotWrap(t *testing.T) {
	t.Parallel()
	if got := microsSat(110_000 * dayUS); got != time.Duration(maxDurationUS)*time.Microsecond {
		t.Fatalf("microsSat(110 000 days in µs) = %s", got)
	}
	if got := microsSat(1500); got != 1500*time.Microsecond {
		t.Fatalf("microsSat(1500) = %s", got)
	}
}

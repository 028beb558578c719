package bucket

import (
	_ "embed"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// The algorithms' scripts. Each takes one key (KEYS[1], see redisKey) and the
// same ARGV: now_us ("0" = Redis TIME), cost, then two parameters (see
// scriptParams), and replies {allowed, remaining, retry_after_us,
// reset_after_us}. The contract is in each file's header.
var (
	//go:embed prelude.lua
	preludeLua string
	//go:embed fixed_window.lua
	fixedWindowLua string
	//go:embed sliding_log.lua
	slidingLogLua string
	//go:embed sliding_window.lua
	slidingWindowLua string
	//go:embed token_bucket.lua
	tokenBucketLua string
	//go:embed gcra.lua
	gcraLua string
)

// script is one Lua script and its EVALSHA handle.
type script = redisscript.Script

// newScript prepends prelude.lua to src.
func newScript(name, src string) *script {
	return redisscript.New(name, preludeLua+src)
}

// scripts maps each algorithm to its script.
var scripts = map[Algorithm]*script{
	FixedWindow:   newScript(string(FixedWindow), fixedWindowLua),
	SlidingLog:    newScript(string(SlidingLog), slidingLogLua),
	SlidingWindow: newScript(string(SlidingWindow), slidingWindowLua),
	TokenBucket:   newScript(string(TokenBucket), tokenBucketLua),
	GCRA:          newScript(string(GCRA), gcraLua),
}

// scriptParams are ARGV[3] and ARGV[4] for l: window (µs) and limit for the
// window algorithms, emission interval T (µs) and burst for the bucket ones.
func scriptParams(l Limit) (int64, int64) {
	if l.Algorithm.Windowed() {
		return l.Window.Microseconds(), l.Limit
	}
	return l.Rate.IntervalMicros(), l.Burst
}

// maxExact bounds the products the scripts compute (L·W in the sliding
// window, b·T in the bucket algorithms), so that with a present-day now
// (≈ 2^50.7 µs) every intermediate stays an exact integer in Lua's doubles
// (< 2^53).
const maxExact = 1 << 52

// MaxSpanMicros bounds burst × emission interval (µs) of a token bucket or
// GCRA limit: NewLimiter refuses a larger one (at 1/d a burst of at most
// ⌊2^52 / 86.4·10⁹⌋ = 52 124). Configuration checks it up front with this.
const MaxSpanMicros = maxExact

// checkExact reports whether l's parameters keep the scripts' integer
// arithmetic exact. The fixed window and the sliding log multiply nothing.
func checkExact(l Limit) bool {
	p1, p2 := scriptParams(l)
	if p1 > maxExact/4 {
		return false
	}
	switch l.Algorithm {
	case FixedWindow, SlidingLog:
		return true
	}
	return p2 <= maxExact/p1
}

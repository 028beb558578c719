package redisscript

import (
	_ "embed"
	"strconv"
	"time"
)

// Clock is clock.lua, the clock of every Sluice script: clock(arg) is now
// in µs — arg, a caller's fake now, when it is a positive number (tests),
// else Redis TIME (production passes "0"). The store assembles it ahead of
// its shared library; NewClocked ahead of a standalone script.
//
//go:embed clock.lua
var Clock string

// NewClocked returns the standalone Script name: clock.lua, then body.
func NewClocked(name, body string) *Script { return New(name, Clock+"\n"+body) }

// Micros is n µs, the scripts' unit of time, as a Duration.
func Micros(n int64) time.Duration { return time.Duration(n) * time.Microsecond }

// MicrosTime is the instant n µs after the Unix epoch; the zero Time for 0
// (the scripts' "none").
func MicrosTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.UnixMicro(n)
}

// NowArg is the now argument of a script on clock.lua: clock's time in µs,
// or "0" — Redis TIME — for a nil clock (production).
func NowArg(clock func() time.Time) string {
	if clock == nil {
		return "0"
	}
	return strconv.FormatInt(clock().UnixMicro(), 10)
}

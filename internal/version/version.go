// Package version says which build of Sluice is running: the version its
// binaries log at start and send as User-Agent: Sluice/<version>.
package version

import (
	"runtime/debug"
	"sync"
)

// Stamp, when set at link time, is the version, verbatim:
//
//	go build -ldflags "-X github.com/sluicehq/sluice/internal/version.Stamp=$(git describe --always --dirty)"
//
// scripts/run and the Dockerfile set it; empty means "read the build info".
var Stamp string

// Unknown is the version of a build that carries none: no Stamp, no module
// version and no VCS information (go test, go build -buildvcs=false).
const Unknown = "dev"

// String returns the version of the running binary: Stamp when set; else
// the main module's version from the build info (go build in a git
// checkout sets it, Go ≥ 1.24: a tag or a pseudo-version, +dirty when
// modified); else the VCS revision's first 12 hex digits, with "-dirty"
// when the checkout was modified; else Unknown. Safe for concurrent use.
func String() string { return cached() }

// UserAgent is "Sluice/" + String(), the User-Agent of every request Sluice
// sends.
func UserAgent() string { return userAgent() }

var userAgent = sync.OnceValue(func() string { return "Sluice/" + String() }) // once, not per request

var cached = sync.OnceValue(func() string {
	info, _ := debug.ReadBuildInfo()
	return resolve(Stamp, info)
})

// resolve is String's rule for a stamp and build info (nil when none).
func resolve(stamp string, info *debug.BuildInfo) string {
	if stamp != "" {
		return stamp
	}
	if info == nil {
		return Unknown
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return Unknown
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += "-dirty"
	}
	return rev
}

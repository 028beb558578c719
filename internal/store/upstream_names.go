package store

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/policy"
)

// MaxUpstreamsPerJob is the most upstreams one job may name (issue #15;
// the twin of internal/upstream's MaxPerJob).
const MaxUpstreamsPerJob = 4

// MaxUpstreamNameLen is the longest upstream name, in bytes.
const MaxUpstreamNameLen = 64

// ValidUpstreamName checks an upstream name: the rules of a tenant id
// (policy.ValidTenantID: [A-Za-z0-9._@-], no key separator, no hash-tag
// brace, no ','), at most MaxUpstreamNameLen bytes. The error wraps
// ErrInvalid.
func ValidUpstreamName(name string) error {
	if len(name) > MaxUpstreamNameLen {
		return invalidf("upstream name of %d bytes: at most %d allowed", len(name), MaxUpstreamNameLen)
	}
	if err := policy.ValidTenantID(name); err != nil {
		return fmt.Errorf("%w: upstream name %q: %w", ErrInvalid, name, err)
	}
	return nil
}

// checkUpstreams checks a job's upstreams: at most MaxUpstreamsPerJob, each
// valid, none twice.
func checkUpstreams(names []string) error {
	if len(names) > MaxUpstreamsPerJob {
		return invalidf("%d upstreams: at most %d allowed", len(names), MaxUpstreamsPerJob)
	}
	for i, n := range names {
		if err := ValidUpstreamName(n); err != nil {
			return err
		}
		if slices.Contains(names[:i], n) {
			return invalidf("upstream %q named twice", n)
		}
	}
	return nil
}

// splitUpstreams is the names of a record field ups; nil for "".
func splitUpstreams(field string) []string {
	if field == "" {
		return nil
	}
	return strings.Split(field, ",")
}

// upstreamsField is record field ups of a job naming names (checked): the
// names sorted, joined by ','; "" for none.
func upstreamsField(names []string) string {
	if len(names) == 0 {
		return ""
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	return strings.Join(sorted, ",")
}

package store

import (
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/upstream"
)

// checkUpstreams checks a job's upstreams: at most upstream.MaxPerJob,
// each a valid name (upstream.ValidName), none twice. The error wraps
// ErrInvalid.
func checkUpstreams(names []string) error {
	if len(names) > upstream.MaxPerJob {
		return invalidf("%d upstreams: at most %d allowed", len(names), upstream.MaxPerJob)
	}
	for i, n := range names {
		if err := quota.CheckName(n); err != nil {
			return err
		}
		if slices.Contains(names[:i], n) {
			return invalidf("upstream %q named twice", n)
		}
	}
	return nil
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

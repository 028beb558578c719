package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// required are the flags every run needs.
var required = []string{"-redis", "redis://127.0.0.1:1/0", "-throttler", "t", "-worker", "w", "-dir", "d"}

// TestQuickKeepsExplicitFlags: -quick sets its smaller sizes, and a flag
// given explicitly wins over it.
func TestQuickKeepsExplicitFlags(t *testing.T) {
	t.Parallel()
	o, err := parseFlags(append(slices.Clone(required), "-quick", "-precision-jobs", "700", "-parts", "precision,scale"))
	if err != nil {
		t.Fatal(err)
	}
	if o.precJobs != 700 {
		t.Errorf("precision-jobs = %d, want the explicit 700", o.precJobs)
	}
	if o.tputJobs != 5000 || o.peerTime != 30*time.Second || o.idleWakeups != 3 {
		t.Errorf("throughput-jobs %d, peer-time %s, idle-wakeups %d: want -quick's 5000, 30s, 3", o.tputJobs, o.peerTime, o.idleWakeups)
	}
	if !slices.Equal(o.scaleTenants, []int{10, 1000, 20000}) || !slices.Equal(o.parts, []string{"precision", "scale"}) {
		t.Errorf("scale-tenants %v, parts %v: want [10 1000 20000], [precision scale]", o.scaleTenants, o.parts)
	}
}

// TestParseFlagsRefusesBadValues: each value out of its bounds is refused
// with a message naming it.
func TestParseFlagsRefusesBadValues(t *testing.T) {
	t.Parallel()
	if _, err := parseFlags(nil); err == nil || !strings.Contains(err.Error(), "-redis, -throttler, -worker and -dir are required") {
		t.Errorf("parseFlags() = %v, want the required flags named", err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-parts", "precision,fast"}, `unknown part "fast"`},
		{[]string{"-scale-tenants", "10,x"}, `scale-tenants: bad count "x"`},
		{[]string{"-parts", "scale-out"}, "-parts scale-out needs -cluster"},
		{[]string{"-idle-gap", "500ms"}, "bad idle flags"},
		{[]string{"-peer-retry", "never"}, "-peer-retry: want wiki or limiter"},
		{[]string{"-soak-retention", "100ms"}, "bad soak flags"},
	} {
		args := append(slices.Clone(required), c.args...)
		_, err := parseFlags(args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseFlags(%q) = %v, want an error with %q", args, err, c.want)
		}
	}
}

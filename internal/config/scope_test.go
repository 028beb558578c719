package config

import (
	"slices"
	"testing"
)

// TestLimitScope: a limit is per API key unless scope: shared; scope takes
// only api_key or shared, and not on the api limit (always per API key).
func TestLimitScope(t *testing.T) {
	t.Parallel()
	c, err := loadString(t, `
limits:
  mine: {algorithm: gcra, rate: 1/s, burst: 1}
  keyed: {algorithm: gcra, rate: 1/s, burst: 1, scope: api_key}
  common: {algorithm: fixed_window, limit: 5, window: 1s, scope: shared}
`)
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits["mine"].Shared() || c.Limits["keyed"].Shared() || !c.Limits["common"].Shared() {
		t.Errorf("Shared(): mine %v, keyed %v, common %v; want false, false, true",
			c.Limits["mine"].Shared(), c.Limits["keyed"].Shared(), c.Limits["common"].Shared())
	}
	_, err = loadString(t, `
limits:
  api: {algorithm: sliding_window, limit: 10, window: 1m, scope: shared}
  odd: {algorithm: gcra, rate: 1/s, burst: 1, scope: tenant}
`)
	if got := problemFields(t, err); !slices.Equal(got, []string{"limits.api.scope", "limits.odd.scope"}) {
		t.Errorf("problems %v (%v), want limits.api.scope and limits.odd.scope", got, err)
	}
}

package config

import (
	"cmp"
	"time"

	"github.com/sluicehq/sluice/internal/tuning"
)

// MetricsConfig tunes the throttler's state metrics (dispatch.StateConfig).
type MetricsConfig struct {
	// TopTenants is how many tenants get their own label: the largest
	// backlogs, re-chosen at each read; the others are summed under
	// tenant="_other". 1 … tuning.MaxLabeledTenants; default
	// tuning.TopTenantsDefault.
	TopTenants int `yaml:"top_tenants"`
	// CacheFor is how long one read of the tenants serves scrapes; default
	// tuning.StateCacheDefault; positive.
	CacheFor time.Duration `yaml:"cache_for"`
}

func (m MetricsConfig) withDefaults() MetricsConfig {
	return MetricsConfig{TopTenants: cmp.Or(m.TopTenants, tuning.TopTenantsDefault),
		CacheFor: cmp.Or(m.CacheFor, tuning.StateCacheDefault)}
}

func (m MetricsConfig) validate(p *problems) {
	if m.TopTenants < 1 || m.TopTenants > tuning.MaxLabeledTenants {
		p.add("metrics.top_tenants", "want 1 … %d, got %d", tuning.MaxLabeledTenants, m.TopTenants)
	}
	p.positive("metrics.cache_for", m.CacheFor)
}

package config

// UIEnabledDefault is ui.enabled when unset: the console is served.
const UIEnabledDefault = true

// UIConfig configures the operator console the throttler serves at /ui/
// (internal/console). It has no power of its own: every read and write it
// makes is a /v1 call with the signed-in API key.
type UIConfig struct {
	// Enabled serves the console at /ui/; default UIEnabledDefault. false:
	// /ui/ answers 404.
	Enabled *bool `yaml:"enabled"`
}

// On reports whether the console is served: Enabled, or UIEnabledDefault
// when unset.
func (u UIConfig) On() bool {
	if u.Enabled == nil {
		return UIEnabledDefault
	}
	return *u.Enabled
}

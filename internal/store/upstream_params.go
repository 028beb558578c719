package store

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"
)

//go:embed lua/upstream_adapt.lua
var luaUpstreamAdapt string

// scriptUpstreamAdapt stands alone: its key is the upstream's slot.
var scriptUpstreamAdapt = standalone("upstream_adapt", luaUpstreamAdapt)

// UpstreamOutcome feeds one attempt of a job naming upstream name to its
// adaptive rate (params a = 1; a no-op for the others): congested (a
// throttle, a 5xx, a timeout: wire.AttemptOutcome.Congested) halves its
// rate factor once per episode, down to cfg.AdaptiveFloorPPM; a success
// adds cfg.AdaptiveStepPPM, up to full — only for an attempt slotted at or
// after the current episode's end (lua/upstream_adapt.lua). The
// coordinator spaces new segments by the effective interval ⌈T·10⁶ / f⌉.
// It returns the factor (ppm) and the effective interval.
func (s *Store) UpstreamOutcome(ctx context.Context, name string, congested bool, slot time.Time, cfg FinishConfig) (int64, time.Duration, error) {
	cfg = cfg.WithDefaults()
	if err := checkUpstreamName(name); err != nil {
		return 0, 0, fmt.Errorf("upstream %q outcome: %w", name, err)
	}
	d, err := s.runKeys(ctx, scriptUpstreamAdapt, []string{s.keys.upstream(name)},
		s.nowArg(), boolInt(congested), slot.UnixMicro(), cfg.AdaptiveFloorPPM, cfg.AdaptiveStepPPM)
	if errors.Is(err, ErrNotFound) {
		return 0, 0, fmt.Errorf("upstream %q outcome: %w", name, ErrUpstreamNotFound)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("upstream %q outcome: %w", name, err)
	}
	f, iv := d.int(1), us(d.int(2))
	if err := d.Err(); err != nil {
		return 0, 0, fmt.Errorf("upstream %q outcome: %w", name, err)
	}
	return f, iv, nil
}

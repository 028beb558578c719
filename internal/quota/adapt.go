package quota

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/tuning"
)

// AdaptConfig is how UpstreamOutcome moves an adaptive upstream's rate
// factor; the tenants' adaptive settings (store.FinishConfig.Adapt
// resolves their defaults).
type AdaptConfig struct {
	// FloorPPM is the lowest factor a congestion cuts to, in parts per
	// million: 1 … tuning.RateFactorFull.
	FloorPPM int64
	// StepPPM is the factor a success adds back, in parts per million:
	// 1 … tuning.RateFactorFull.
	StepPPM int64
}

// validate lists every problem of c.
func (c AdaptConfig) validate() error {
	if c.FloorPPM < 1 || c.FloorPPM > tuning.RateFactorFull || c.StepPPM < 1 || c.StepPPM > tuning.RateFactorFull {
		return invalidf("adaptive floor %d ppm, step %d ppm: want 1 … %d each", c.FloorPPM, c.StepPPM, tuning.RateFactorFull)
	}
	return nil
}

// UpstreamOutcome feeds one attempt of a job naming upstream name to its
// adaptive rate (params a = 1; a no-op for the others): congested (a
// throttle, a 5xx, a timeout: wire.AttemptOutcome.Congested) halves its
// rate factor once per episode, down to cfg.FloorPPM; a success adds
// cfg.StepPPM, up to full — only for an attempt slotted at or
// after the current episode's end (lua/upstream_adapt.lua). The
// coordinator spaces new segments by the effective interval ⌈T·10⁶ / f⌉.
// It returns the factor (ppm) and the effective interval. A bad name or cfg
// is ErrInvalid and changes nothing.
func (q *Registry) UpstreamOutcome(ctx context.Context, name string, congested bool, slot time.Time, cfg AdaptConfig) (int64, time.Duration, error) {
	if err := errors.Join(CheckName(name), cfg.validate()); err != nil {
		return 0, 0, fmt.Errorf("upstream %q outcome: %w", name, err)
	}
	var signal int64 // 1: congested
	if congested {
		signal = 1
	}
	d, err := q.runKeys(ctx, scriptUpstreamAdapt, []string{q.keys.upstream(name)},
		q.nowArg(), signal, slot.UnixMicro(), cfg.FloorPPM, cfg.StepPPM)
	if errors.Is(err, redisscript.ErrNotFound) {
		return 0, 0, fmt.Errorf("upstream %q outcome: %w", name, ErrUpstreamNotFound)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("upstream %q outcome: %w", name, err)
	}
	f, iv := d.Int(1), redisscript.Micros(d.Int(2))
	if err := d.Err(); err != nil {
		return 0, 0, fmt.Errorf("upstream %q outcome: %w", name, err)
	}
	return f, iv, nil
}

package dispatch

import (
	"context"
	"fmt"
	"time"
)

// Fair shares of the workers' pool (docs/design.md §2.2 "Fair shares of the pool",
// docs/dispatch.md "Fair shares of the worker pool").
//
// While the pool is contended, the budget hands every pass λ, the workers'
// slots per unit of tenant weight, deployment-wide: λ = (capacity − R) ÷ W,
// W the weight of the tenants holding worker slots (running or released
// jobs) plus that of the tenants the shards' last passes left waiting with
// none (store.FairWeights), and R = ⌈capacity / 16⌉ slots kept for the
// tenants below their shares — a tenant that arrives while the pool is
// full of slow jobs finds its first slots free, instead of waiting for the
// first slow job to end. A pass then releases nothing more for a tenant
// holding max(1, ⌊weight·λ⌋) slots (store.PassConfig.FairShare), whatever
// its concurrency allows: a tenant whose jobs hold slots long keeps its
// share and no more, and the slots the others' quick jobs free go back to
// them. λ is one number for every shard, so the shares are weighted across
// shards as within one. W is the largest weight read within the last
// second (weightsMemory).
//
// Contended: within the last contentionMemory, a reading found 7/8 of the
// capacity in use (leases + hand-off tasks waiting), or the passes used
// the free capacity up (spend left none, or a loop found none: want).
// Otherwise no pass gets λ: with free capacity for all, nothing changes.
// The first threshold brings the caps before slow tenants fill the pool;
// the memory keeps them on while the tenants at their shares fill it and
// another's holdings dip between its quick jobs (else the dip would go to
// a slow tenant for the length of its job). A pool short of 7/8 for that
// long gives every tenant what it asks, up to its concurrency, again.
const (
	contentionMemory               = time.Second
	contendedAtNum, contendedAtDen = 7, 8
	reserveDen                     = 16 // R = ⌈capacity / reserveDen⌉
	// weightsEvery is the longest the weights are reused while contended:
	// they change with every tenant that starts or stops holding slots,
	// but W is the largest read over weightsMemory anyway, so reading
	// them more often only brings a rise forward (meanwhile the R slots
	// serve a tenant that arrives). At 20 ms, their HMGETs (one per
	// shard) were ~0.27 of the throughput benchmark's Redis commands per
	// job: one per shard at almost every reading of a full pool.
	weightsEvery = 100 * time.Millisecond
	// weightsMemory is how long the largest weight read counts: a tenant
	// whose quick jobs leave it holding no slot between two of them (a
	// low rate) still counts, and its share is not handed to the slow
	// tenants at the first dip.
	weightsMemory = time.Second
)

// readLambda notes a reading of capacity with used slots in use and
// returns λ: 0 while uncontended, else (capacity − R) ÷ the largest weight
// read in the last weightsMemory (read again when older than
// weightsEvery). Only the reader (run) calls it.
func (b *budget) readLambda(ctx context.Context, capacity, used int, now time.Time) (float64, error) {
	b.mu.Lock()
	if capacity > 0 && used*contendedAtDen >= capacity*contendedAtNum {
		b.contendedAt = now
	}
	lambda, contended := b.lambda, b.contendedAt
	b.mu.Unlock()
	if capacity <= 0 || contended.IsZero() || now.Sub(contended) > contentionMemory {
		b.weightsAt = time.Time{}
		return 0, nil
	}
	if !b.weightsAt.IsZero() && now.Sub(b.weightsAt) < weightsEvery {
		return lambda, nil
	}
	w, err := b.store.FairWeights(ctx)
	if err != nil {
		return 0, fmt.Errorf("read fair-share weights: %w", err)
	}
	b.weightsAt = now
	if total := w.Total(); total >= b.weight || now.Sub(b.weightAt) > weightsMemory {
		b.weight, b.weightAt = total, now
	}
	if b.weight <= 0 {
		return 0, nil
	}
	return float64(max(capacity-(capacity+reserveDen-1)/reserveDen, 1)) / float64(b.weight), nil
}

// fairShare is λ for a pass starting now: 0 while the pool is not
// contended (no cap but the tenants' concurrency).
func (b *budget) fairShare() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lambda
}

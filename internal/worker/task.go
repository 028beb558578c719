package worker

import (
	"context"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/wire"
)

// ProcessTaskJob runs one delivery of a task job (docs/design.md §2.5) through the
// same protocol as ProcessTask: wait for the slot, claim, execute with the
// job's timeout, finish. Only the hand-off differs: a task job's asynq task
// carries the job's id, generation and slot in its headers
// (wire.HeaderJob, HeaderGen, HeaderSlot) and has an empty payload; exec
// (Config.Executor when nil) runs the attempt with the job's body from the
// claim and ctx (with the attempt's deadline added) — the sluicetask
// middleware passes an executor that calls the user's handler.
//
// It returns nil for every task whose headers parse, whatever happened
// (Sluice owns retries; the sweep recovers a job this call could not
// settle), and an error wrapping wire.ErrBadPayload otherwise.
func (w *Worker) ProcessTaskJob(ctx context.Context, t *asynq.Task, exec Executor) error {
	p, err := wire.PayloadFromHeaders(t.Headers())
	if err != nil {
		w.cfg.Logger.Error("drop task with malformed sluice headers", "type", t.Type(), "err", err)
		return fmt.Errorf("process %s task job: %w", t.Type(), err)
	}
	if exec == nil {
		exec = w.cfg.Executor
	}
	w.deliver(ctx, p, exec, nil)
	return nil
}

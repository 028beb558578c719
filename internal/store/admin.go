package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Pause pauses tenant by an operator (docs/design.md §6): with a zero until,
// indefinitely — the tenant leaves the ready set until Resume; else until
// that time — no slot before it. The latest Pause replaces an earlier one.
// Jobs already released see the pause at their claim and return to the head
// lane unsent. Enqueue keeps accepting jobs. A tenant never seen before is
// created paused.
func (s *Store) Pause(ctx context.Context, tenant string, until time.Time) error {
	var untilUS int64
	if !until.IsZero() {
		untilUS = until.UnixMicro()
	}
	err := checkTenant(tenant)
	if err == nil && !until.IsZero() && (untilUS <= 0 || untilUS > maxTimeUS) {
		err = invalidf("until %s: want 1970 … 2112", until)
	}
	if err == nil {
		_, err = s.run(ctx, scriptAdmin, s.keys.shardOf(tenant), "pause", tenant, untilUS)
	}
	if err != nil {
		return fmt.Errorf("pause tenant %q: %w", tenant, err)
	}
	return nil
}

// Resume clears tenant's admin pause (indefinite or timed), its upstream
// pause (paused_until, from throttled outcomes) and its 410 disable, and
// reschedules it.
func (s *Store) Resume(ctx context.Context, tenant string) error {
	err := checkTenant(tenant)
	if err == nil {
		_, err = s.run(ctx, scriptAdmin, s.keys.shardOf(tenant), "resume", tenant, 0)
	}
	if err != nil {
		return fmt.Errorf("resume tenant %q: %w", tenant, err)
	}
	return nil
}

// MaxDeadLettersPage bounds DeadLetters' limit.
const MaxDeadLettersPage = 1000

// DeadLetters returns up to limit (1 … MaxDeadLettersPage) of tenant's dead
// letters, oldest death first, starting after cursor ("" = from the start),
// and the cursor of the next page ("" when this page is the last). Cursors
// are opaque; a cursor stays valid when letters are replayed or trimmed in
// between (the page starts after its position). Read-only.
func (s *Store) DeadLetters(ctx context.Context, tenant, cursor string, limit int) ([]Job, string, error) {
	score, after, err := parseCursor(cursor)
	if err == nil {
		err = checkTenant(tenant)
	}
	if err == nil && (limit < 1 || limit > MaxDeadLettersPage) {
		err = invalidf("limit %d: want 1 … %d", limit, MaxDeadLettersPage)
	}
	if err != nil {
		return nil, "", fmt.Errorf("dead letters of tenant %q: %w", tenant, err)
	}
	d, err := s.run(ctx, scriptDeadLetters, s.keys.shardOf(tenant), tenant, limit, score, after)
	if err != nil {
		return nil, "", fmt.Errorf("dead letters of tenant %q: %w", tenant, err)
	}
	jobs := make([]Job, 0, d.Len()-3)
	var errs []error
	for i := 3; i < d.Len(); i++ {
		j, err := parseJobItem(d.list(i))
		if err != nil {
			errs = append(errs, err)
		}
		jobs = append(jobs, j)
	}
	next := ""
	if nextScore := d.int(1); nextScore >= 0 {
		next = strconv.FormatInt(nextScore, 10) + ":" + d.str(2)
	}
	if err := errors.Join(d.Err(), errors.Join(errs...)); err != nil {
		return nil, "", fmt.Errorf("dead letters of tenant %q: %w", tenant, err)
	}
	return jobs, next, nil
}

// parseJobItem reads a script's {id, {field, value, …}, …} job item.
func parseJobItem(item decoder) (Job, error) {
	id := item.str(0)
	j, err := parseJob(id, item.list(1).fields(0))
	if err != nil {
		return j, fmt.Errorf("job %q: %w", id, err)
	}
	return j, nil
}

// parseCursor splits a DeadLetters cursor "<score>:<id>"; "" is the start.
func parseCursor(c string) (int64, string, error) {
	if c == "" {
		return -1, "", nil
	}
	num, id, ok := strings.Cut(c, ":")
	score, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || score < 0 || id == "" {
		return 0, "", invalidf("cursor %q", c)
	}
	return score, id, nil
}

// Replay re-queues dead job id at its tenant's backlog tail (docs/design.md §2): the
// same id, gen + 1, its attempts and attempt log kept — so a job whose
// attempts or retry duration are used up gets exactly one more attempt —
// admission not charged, backlog caps not applied. It returns the record
// after the replay. A job that is not dead: a *ConflictError (ErrConflict);
// no such job: ErrNotFound. With Config.WaitReplicas, a replay fewer
// replicas confirmed in time returns the record and a *NotReplicatedError.
func (s *Store) Replay(ctx context.Context, id string) (Job, error) {
	shard, err := s.jobShard(id)
	if err != nil {
		return Job{}, fmt.Errorf("replay job %q: %w", id, err)
	}
	d, acked, err := s.runWaited(ctx, scriptReplay, shard, id)
	if errors.Is(err, ErrConflict) {
		state := State(d.str(1))
		if derr := d.Err(); derr != nil {
			return Job{}, fmt.Errorf("replay job %q: %w", id, derr)
		}
		return Job{}, fmt.Errorf("replay job %q: %w", id, &ConflictError{ID: id, State: state})
	}
	if err != nil {
		return Job{}, fmt.Errorf("replay job %q: %w", id, err)
	}
	fields := d.fields(1)
	if err := d.Err(); err != nil {
		return Job{}, fmt.Errorf("replay job %q: %w", id, err)
	}
	job, err := parseJob(id, fields)
	if err != nil {
		return Job{}, fmt.Errorf("replay job %q: %w", id, err)
	}
	if s.waiting() {
		if err := s.checkAcked(acked); err != nil {
			return job, fmt.Errorf("replay job %q: %w", id, err)
		}
	}
	return job, nil
}

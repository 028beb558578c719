package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/accept"
	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/jobview"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/webhook"
	"github.com/sluicehq/sluice/internal/wire"
)

// AdmitLimit is the policy name of a tenant's admission bucket in the
// rate-limit headers of enqueue responses.
const AdmitLimit = "admit"

// HeaderIdempotencyKey and HeaderReplayed are the idempotency headers of
// POST /v1/tenants/{tenant}/jobs.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderReplayed       = "Idempotent-Replayed"
)

// jobRef is the body of a 202 enqueue answer (and of each accepted batch
// item): the job's id, tenant, state and eta, a lower bound of its first
// slot (null when unknown: a replay whose job record has expired).
type jobRef struct {
	ID     string  `json:"id"`
	Tenant string  `json:"tenant"`
	State  string  `json:"state"`
	ETA    *string `json:"eta"`
}

// enqueue is POST /v1/tenants/{tenant}/jobs: one job, optionally under an
// Idempotency-Key header, fingerprinted by the SHA-256 of the raw body.
// 202 with a jobRef (a replay also sets Idempotent-Replayed: true); 429
// rate_limited or backlog_full with Retry-After; 422 idempotency_mismatch,
// invalid, no_task_worker (a task job for a queue no sluicetask
// middleware serves) or no_webhook_secret (a webhook job of a tenant with
// no signing secret whose policy is not unsigned, and a job with a callback
// of such a tenant: tenantContext.SignsWebhooks);
// those two store nothing, not even the idempotency key, but a replay of an
// accepted request still answers 202. Every answer from the
// store carries the "admit" headers.
func (s *Server) enqueue(r *http.Request, c *call) (int, any, error) {
	tenant, err := tenantOf(r, c)
	if err != nil {
		return 0, nil, err
	}
	key, err := idempotencyKey(r.Header)
	if err != nil {
		return 0, nil, err
	}
	raw, err := readJSONBody(c.w, r, s.opts.MaxJobBytes)
	if err != nil {
		return 0, nil, err
	}
	spec, err := parseJob(raw)
	if err != nil {
		return 0, nil, err
	}
	if spec.IdempotencyKey != "" {
		return 0, nil, errorf(http.StatusUnprocessableEntity, CodeInvalid,
			"idempotency_key: only batch items carry it; send the Idempotency-Key header")
	}
	it, spec, err := s.itemOf(spec, &tenantContext{s: s, r: r, tenant: tenant})
	if err != nil {
		return 0, nil, err
	}
	it.IdemKey, it.Fingerprint = key, sha256.Sum256(raw)
	if spec.Type == wire.TypeTask {
		refusal, err := s.taskQueueRefusal(r, &it, spec.Queue)
		if err != nil {
			return 0, nil, err
		}
		if refusal != nil {
			return 0, nil, refusal
		}
	}
	res, err := s.storeEnqueue(r, tenant, []store.Item{it})
	if res == nil {
		return 0, nil, err
	}
	out := resultOf(0, tenant, res[0])
	c.applied = append(c.applied, admitApplied(res[0].Admit, out.retry))
	switch {
	case out.Error != nil:
		return 0, nil, &Error{Status: out.Status, Code: out.Error.Code, Message: out.Error.Message, RetryAfter: out.RetryAfter}
	case err != nil:
		return 0, nil, s.notReplicated("enqueue", err, []string{out.ID}, retryEnqueue(key))
	case out.Replayed:
		c.w.Header().Set(HeaderReplayed, "true")
	}
	return out.Status, out.jobRef, nil
}

// batchRequest is the body of POST /v1/tenants/{tenant}/jobs:batch.
type batchRequest struct {
	Jobs []json.RawMessage `json:"jobs"`
}

// batchResponse answers a batch: one result per item, in order; on a
// non-202 answer also the first refusal's error.
type batchResponse struct {
	Error   *errorDetail  `json:"error,omitempty"`
	Results []batchResult `json:"results"`
}

// batchResult is one item's result: {index, status, id, tenant, state, eta
// [, idempotent_replayed]} when accepted or replayed (status 202), else
// {index, status, error {code, message} [, retry_after seconds]}.
type batchResult struct {
	Index   int `json:"index"`
	Status  int `json:"status"`
	*jobRef     // nil when refused
	// Replayed is set on the replay of an earlier item or request.
	Replayed   bool         `json:"idempotent_replayed,omitempty"`
	Error      *errorDetail `json:"error,omitempty"`
	RetryAfter int64        `json:"retry_after,omitempty"` // whole seconds, ≥ 1, on 429s
	retry      time.Duration
}

// enqueueBatch is POST /v1/tenants/{tenant}/jobs:batch: 1–store.MaxBatch
// jobs, each parsed and validated on its own (a bad item gets its own 422 or
// 413 result and stays out of the store); the valid ones go to the store in
// one Enqueue call. A task item for a queue no sluicetask middleware serves
// is refused on its own (422 no_task_worker). 202 when any item was
// accepted or replayed, else the first refusal's status, error and
// Retry-After, with the results.
func (s *Server) enqueueBatch(r *http.Request, c *call) (int, any, error) {
	tenant, err := tenantOf(r, c)
	if err != nil {
		return 0, nil, err
	}
	if r.Header.Get(HeaderIdempotencyKey) != "" {
		return 0, nil, errorf(http.StatusBadRequest, CodeMalformed,
			"%s applies to single jobs; give batch items an idempotency_key", HeaderIdempotencyKey)
	}
	jobs, err := s.readBatch(c.w, r)
	if err != nil {
		return 0, nil, err
	}
	if err := c.chargeItems(r.Context(), len(jobs)); err != nil {
		return 0, nil, err
	}
	results := make([]batchResult, len(jobs))
	var items []store.Item
	var index []int
	tc := &tenantContext{s: s, r: r, tenant: tenant}
	for i, raw := range jobs {
		it, queue, err := s.batchItem(raw, tc)
		var refused *Error
		if err != nil && (!errors.As(err, &refused) || refused.Status >= 500) {
			return 0, nil, err // reading the tenant's capacity failed: nothing was stored
		}
		if err == nil && queue != "" {
			refusal, errLive := s.taskQueueRefusal(r, &it, queue)
			if errLive != nil {
				return 0, nil, errLive // nothing was stored
			}
			if refusal != nil {
				err = refusal
			}
		}
		if err != nil {
			results[i] = failedResult(i, err)
			continue
		}
		items, index = append(items, it), append(index, i)
	}
	if len(items) == 0 {
		return batchAnswer(results)
	}
	res, err := s.storeEnqueue(r, tenant, items)
	if res == nil {
		return 0, nil, err
	}
	for k, rr := range res {
		results[index[k]] = resultOf(index[k], tenant, rr)
	}
	status, body, _ := batchAnswer(results)
	var retry time.Duration // a 429's wait, shown as the admit limit's t and Retry-After
	if status == http.StatusTooManyRequests {
		retry = results[0].retry
	}
	c.applied = append(c.applied, admitApplied(res[len(res)-1].Admit, retry))
	if err != nil {
		c.w.Header().Set("Retry-After", strconv.Itoa(ReplicationRetryAfter))
		return s.batchNotReplicated(err, results)
	}
	return status, body, nil
}

// batchAnswer is 202 when any item was accepted or replayed; else the first
// refusal's status and error, with every result.
func batchAnswer(results []batchResult) (int, any, error) {
	for _, br := range results {
		if br.Error == nil {
			return http.StatusAccepted, batchResponse{Results: results}, nil
		}
	}
	first := results[0]
	return first.Status, batchResponse{Error: first.Error, Results: results}, nil
}

// readBatch reads and decodes a batch body (415, 413, 400; 422 for unknown
// fields, wrong types and a count outside 1 … store.MaxBatch).
func (s *Server) readBatch(w http.ResponseWriter, r *http.Request) ([]json.RawMessage, error) {
	raw, err := readJSONBody(w, r, s.opts.MaxBatchBytes)
	if err != nil {
		return nil, err
	}
	var req batchRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, invalidJSON(err)
	}
	if n := len(req.Jobs); n < 1 || n > store.MaxBatch {
		return nil, errorf(http.StatusUnprocessableEntity, CodeInvalid, "jobs: %d items, want 1 to %d", n, store.MaxBatch)
	}
	return req.Jobs, nil
}

// batchItem parses and validates one batch item (see itemFingerprint); for
// a task job it also returns its queue. An item that is not valid UTF-8 is
// 400 malformed, on its own.
func (s *Server) batchItem(raw json.RawMessage, tc *tenantContext) (it store.Item, taskQueue string, err error) {
	if err := job.CheckUTF8(raw); err != nil {
		return store.Item{}, "", errorf(http.StatusBadRequest, CodeMalformed, "malformed item: %s", err.Error())
	}
	spec, err := job.Parse(raw) // raw is valid JSON: it came out of the batch body
	if err != nil {
		return store.Item{}, "", invalidJSON(err)
	}
	if err := checkIdemKey("idempotency_key", spec.IdempotencyKey, http.StatusUnprocessableEntity, CodeInvalid); err != nil {
		return store.Item{}, "", err
	}
	it, spec, err = s.itemOf(spec, tc)
	if err != nil {
		return store.Item{}, "", err
	}
	if n := int64(len(it.Body)); n > s.opts.MaxJobBytes {
		return store.Item{}, "", errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, "job is %d bytes, the limit is %d", n, s.opts.MaxJobBytes)
	}
	it.IdemKey = spec.IdempotencyKey // it.Fingerprint: itemOf's
	if spec.Type == wire.TypeTask {
		taskQueue = spec.Queue
	}
	return it, taskQueue, nil
}

// itemFingerprint identifies a batch item under its idempotency key: the
// SHA-256 of its canonical JSON as sent (body: before the policy's default
// upstreams are filled in, so a retry after a change of the default is
// still the same request) and its cost and schedule, so items that differ
// only in cost, delay or run_at are different requests.
func itemFingerprint(body []byte, it store.Item) [32]byte {
	h := sha256.New()
	h.Write(body)
	fmt.Fprintf(h, "\x00cost=%d\x00run_at_us=%d\x00delay_us=%d", it.Cost, it.RunAt.UnixMicro(), it.Delay.Microseconds())
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// parseJob decodes one job strictly: 400 for malformed JSON or JSON that
// is not valid UTF-8 (naming where), 422 naming the field for an unknown
// field or a wrong type.
func parseJob(raw []byte) (job.Spec, error) {
	if !json.Valid(raw) {
		return job.Spec{}, errorf(http.StatusBadRequest, CodeMalformed, "malformed JSON: %s", syntaxError(raw))
	}
	if err := job.CheckUTF8(raw); err != nil {
		return job.Spec{}, errorf(http.StatusBadRequest, CodeMalformed, "malformed JSON body: %s", err.Error())
	}
	spec, err := job.Parse(raw)
	if err != nil {
		return job.Spec{}, invalidJSON(err)
	}
	return spec, nil
}

// invalidJSON is the 422 for well-formed JSON that does not decode into
// its type (an unknown field, a wrong type). Its message is at most
// maxInvalidJSONMessage bytes: an unknown field's name is the client's and
// may be as long as the body.
func invalidJSON(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return errorf(http.StatusUnprocessableEntity, CodeInvalid, "%s", clipMessage(typeMismatch(typeErr)))
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, "json: "); i >= 0 {
		msg = msg[i+len("json: "):]
	}
	return errorf(http.StatusUnprocessableEntity, CodeInvalid, "%s", clipMessage(msg))
}

// maxInvalidJSONMessage bounds invalidJSON's message, in bytes.
const maxInvalidJSONMessage = 256

// clipMessage cuts msg to maxInvalidJSONMessage bytes at a UTF-8 boundary,
// ending it with "…" when cut.
func clipMessage(msg string) string {
	if len(msg) <= maxInvalidJSONMessage {
		return msg
	}
	cut := maxInvalidJSONMessage - len("…")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// itemOf accepts spec for the tenant of tc (accept.Job: every problem of
// its fields in one 422 invalid; 422 unknown_upstream or
// cost_exceeds_upstream_burst; 503 when the tenant's policy or the
// upstream registry cannot be read) and builds its Item with the batch
// fingerprint (itemFingerprint) and the no_webhook_secret refusal
// (Item.Unless) of a tenant the configuration gives no secret; IdemKey is
// left to the caller. It returns the accepted spec, its defaults filled in.
func (s *Server) itemOf(spec job.Spec, tc *tenantContext) (store.Item, job.Spec, error) {
	j, err := accept.Job(tc.r.Context(), spec, tc, accept.Rules{TaskQueues: s.opts.TaskQueues, EgressAllow: s.opts.EgressAllow})
	if err != nil {
		return store.Item{}, spec, s.acceptError(tc.r, err)
	}
	it := store.Item{Type: j.Type, Cost: j.Cost, Delay: j.Delay, RunAt: j.RunAt, Body: j.Body, Callback: j.Callback,
		Upstreams: j.Upstreams}
	if j.Type == wire.TypeWebhook || j.Type == wire.TypeHTTP {
		it.Destination, _ = webhook.Destination(j.Spec.URL) // its circuit (docs/design.md §4.5)
	}
	it.Fingerprint = itemFingerprint(j.Sent, it)
	if j.Unless != nil {
		it.Unless = &store.Refusal{Code: store.Code(j.Unless.Code), Detail: j.Unless.Message}
	}
	return it, j.Spec, nil
}

// acceptError is the answer to a job accept.Job refused: 422 invalid
// listing every problem of its fields, 422 with a refusal's code, or the
// store's answer (503) to a read that failed.
func (s *Server) acceptError(r *http.Request, err error) error {
	var (
		lookup  *accept.LookupError
		invalid *accept.InvalidError
		refusal *accept.Refusal
	)
	switch {
	case errors.As(err, &lookup):
		return s.storeError(r, lookup.Op, lookup.Err)
	case errors.As(err, &invalid):
		return errorf(http.StatusUnprocessableEntity, CodeInvalid, "invalid job: %s", joinMessages(invalid.Err))
	case errors.As(err, &refusal):
		return errorf(http.StatusUnprocessableEntity, refusal.Code, "%s", refusal.Message)
	}
	return err
}

// tenantContext is accept.Tenant for one request: the tenant's capacity —
// min(burst, admit.burst) of its effective policy — read at most once per
// request (only for a job whose cost exceeds policy.MaxBurst: the message
// names the tenant's number, not the bound of every policy), its default
// upstreams and the registry through the server's caches, its signing
// secrets through Options.FileSigned.
type tenantContext struct {
	s        *Server
	r        *http.Request
	tenant   string
	capacity int64 // 0 until read
}

var _ accept.Tenant = (*tenantContext)(nil)

func (c *tenantContext) Name() string { return c.tenant }

func (c *tenantContext) Capacity(ctx context.Context) (int64, error) {
	if c.capacity == 0 {
		rec, err := c.s.opts.Store.TenantPolicy(ctx, c.tenant)
		if err != nil {
			return 0, err
		}
		c.capacity = min(rec.Effective.Burst, rec.Effective.AdmitBurst)
	}
	return c.capacity, nil
}

func (c *tenantContext) DefaultUpstreams(ctx context.Context) ([]string, error) {
	return c.s.policyUpstreams.of(ctx, c.tenant)
}

func (c *tenantContext) Upstreams(ctx context.Context, names []string) ([]accept.Upstream, error) {
	settings, err := c.s.upstreams.Settings(ctx, names)
	if err != nil {
		return nil, err
	}
	out := make([]accept.Upstream, len(settings))
	for i, st := range settings {
		out[i] = accept.Upstream{Found: st.Found, Burst: st.Params.Burst}
	}
	return out, nil
}

// SignsWebhooks: a tenant the configuration gives no secret
// (Options.FileSigned) gets the no_webhook_secret refusal, which the
// enqueue script waives when the tenant holds a live secret by API or its
// policy says unsigned — checked in the same script, no extra round trip.
func (c *tenantContext) SignsWebhooks() bool {
	signed := c.s.rt().FileSigned
	return signed != nil && signed(c.tenant)
}

// storeEnqueue runs Store.Enqueue; a failure is a 503 (nothing was
// stored) without results, and so is a 507 storage_full while the shard's
// Redis master is above the memory high-water mark (memory.go). A *store.NotReplicatedError comes back as it
// is, with the results (redis.wait_replicas: stored on the primary, not
// confirmed by enough replicas).
func (s *Server) storeEnqueue(r *http.Request, tenant string, items []store.Item) ([]store.Result, error) {
	node, refusal := s.memory.admit(r.Context(), s.opts.Store.BacklogKey(tenant))
	if refusal != nil {
		s.metrics.StorageFull.Inc()
		return nil, refusal
	}
	res, err := s.opts.Store.Enqueue(r.Context(), tenant, items)
	jobs, bytes := storedBytes(items, res)
	s.memory.stored(node, jobs, bytes)
	if err != nil && (res == nil || !errors.Is(err, store.ErrNotReplicated)) {
		return nil, s.storeError(r, "enqueue", err)
	}
	for _, rr := range res {
		switch {
		case rr.Outcome == store.Accepted:
			s.metrics.Decisions.WithLabelValues(AdmitLimit, outcome(true)).Inc()
		case rr.Code == store.CodeRateLimited:
			s.metrics.Decisions.WithLabelValues(AdmitLimit, outcome(false)).Inc()
		}
	}
	return res, err
}

// storedBytes is the number of items res says were stored (accepted) and
// their bodies' bytes.
func storedBytes(items []store.Item, res []store.Result) (jobs int, bytes int64) {
	for i, r := range res {
		if r.Outcome == store.Accepted && i < len(items) {
			jobs++
			bytes += int64(len(items[i].Body))
		}
	}
	return jobs, bytes
}

// resultOf maps one store result to its HTTP status and body.
func resultOf(index int, tenant string, r store.Result) batchResult {
	if r.Outcome == store.Accepted || r.Outcome == store.Duplicate {
		ref := &jobRef{ID: r.ID, Tenant: tenant, State: string(r.State), ETA: timeString(r.ETA)}
		return batchResult{Index: index, Status: http.StatusAccepted, jobRef: ref, Replayed: r.Outcome == store.Duplicate}
	}
	br := batchResult{Index: index, Status: http.StatusUnprocessableEntity, Error: &errorDetail{Code: string(r.Code), Message: r.Detail}}
	switch r.Code {
	case store.CodeRateLimited, store.CodeBacklogFull:
		br.Status, br.retry = http.StatusTooManyRequests, r.RetryAfter
		br.RetryAfter = max(1, int64((r.RetryAfter+time.Second-1)/time.Second))
	case store.CodeIdempotencyMismatch, store.CodeInvalid, store.Code(CodeNoTaskWorker), store.CodeNoWebhookSecret:
	default:
		br.Error.Code = CodeInvalid
	}
	return br
}

// failedResult is the result of an item refused before the store.
func failedResult(index int, err error) batchResult {
	var e *Error
	if !errors.As(err, &e) {
		e = errorf(http.StatusUnprocessableEntity, CodeInvalid, "%s", err.Error())
	}
	return batchResult{Index: index, Status: e.Status, Error: &errorDetail{Code: e.Code, Message: e.Message}}
}

// admitApplied is the "admit" limit for the headers: q = the admission
// burst, w = ⌈burst × interval⌉ s, r = tokens left, t = seconds until full;
// when the answer is a 429 (retry > 0), t = Retry-After = retry.
func admitApplied(a store.Admission, retry time.Duration) bucket.Applied {
	return bucket.Applied{
		Name:  AdmitLimit,
		Limit: bucket.Limit{Algorithm: bucket.TokenBucket, Rate: bucket.Rate{Tokens: 1, Per: a.Interval}, Burst: a.Burst},
		Decision: bucket.Decision{Allowed: retry <= 0, Limit: a.Burst, Remaining: a.Tokens,
			RetryAfter: max(retry, 0), ResetAfter: a.FullIn},
	}
}

// jobView is a job as GET and DELETE /v1/jobs/{id} show it (jobview.View).
type jobView = jobview.View

func viewOf(j store.Job) jobView { return jobview.Of(j) }

// getJob is GET /v1/jobs/{id}: 200 with the job; 404 when there is none;
// 403 when the key may not act on the job's tenant.
func (s *Server) getJob(r *http.Request, c *call) (int, any, error) {
	j, err := s.jobFor(r, c)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, viewOf(j), nil
}

// cancelJob is DELETE /v1/jobs/{id}: 200 with the canceled job (and the
// state it left); 409 when it is running or already terminal; 404; 403.
func (s *Server) cancelJob(r *http.Request, c *call) (int, any, error) {
	if _, err := s.jobFor(r, c); err != nil {
		return 0, nil, err
	}
	j, from, err := s.opts.Store.Cancel(r.Context(), r.PathValue("id"))
	var conflict *store.ConflictError
	switch {
	case errors.As(err, &conflict):
		return 0, nil, errorf(http.StatusConflict, CodeConflict, "job %s is %s and can no longer be canceled", conflict.ID, conflict.State)
	case err != nil:
		return 0, nil, s.storeError(r, "cancel", err)
	}
	v := viewOf(j)
	v.CanceledFrom = string(from)
	return http.StatusOK, v, nil
}

// jobFor reads the job of the path's {id} and checks that c's key may act
// on its tenant.
func (s *Server) jobFor(r *http.Request, c *call) (store.Job, error) {
	j, err := s.opts.Store.GetJob(r.Context(), r.PathValue("id"))
	if err != nil {
		return store.Job{}, s.storeError(r, "get_job", err)
	}
	if !c.key.AllowsTenant(j.Tenant) {
		return store.Job{}, errorf(http.StatusForbidden, CodeForbidden, "API key %q may not act on tenant %q", c.key.Name, j.Tenant)
	}
	return j, nil
}

// idempotencyKey reads the Idempotency-Key header: absent is "", else 1 to
// job.MaxIdemKeyLen printable ASCII characters (400 otherwise).
func idempotencyKey(h http.Header) (string, error) {
	vals := h.Values(HeaderIdempotencyKey)
	switch len(vals) {
	case 0:
		return "", nil
	case 1:
		if vals[0] == "" {
			return "", errorf(http.StatusBadRequest, CodeMalformed, "%s: empty; want 1 to %d printable ASCII characters", HeaderIdempotencyKey, job.MaxIdemKeyLen)
		}
		return vals[0], checkIdemKey(HeaderIdempotencyKey, vals[0], http.StatusBadRequest, CodeMalformed)
	default:
		return "", errorf(http.StatusBadRequest, CodeMalformed, "%s given %d times", HeaderIdempotencyKey, len(vals))
	}
}

// checkIdemKey checks an idempotency key ("" = none) with
// job.CheckIdemKey: status and code with "<name>: <problem>" otherwise.
func checkIdemKey(name, key string, status int, code string) error {
	if err := job.CheckIdemKey(key); err != nil {
		return errorf(status, code, "%s: %v", name, err)
	}
	return nil
}

// timeString formats t as RFC 3339 UTC with milliseconds; nil for zero.
func timeString(t time.Time) *string { return jobview.TimeString(t) }

// joinMessages renders the errors of an errors.Join tree as "a; b; c".
func joinMessages(err error) string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts := make([]string, 0, len(j.Unwrap()))
		for _, e := range j.Unwrap() {
			parts = append(parts, joinMessages(e))
		}
		return strings.Join(parts, "; ")
	}
	return err.Error()
}

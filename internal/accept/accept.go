// Package accept decides whether a producer's job may be stored: the one
// place that checks a parsed job (job.Spec) against the deployment's rules
// (task queues, the egress guard) and its tenant's context (capacity,
// default upstreams, the upstream registry, webhook signing secrets), and
// returns the job to store or every problem with it. It does no I/O of its
// own: the Tenant the caller passes reads what it needs.
//
// The HTTP API (internal/api) accepts every job with Job before it calls
// the store; the store checks the attributes of each item again with the
// job package's rules (job.Attrs.Check), for callers that build items by
// hand.
package accept

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/upstream"
	"github.com/sluicehq/sluice/internal/webhook"
	"github.com/sluicehq/sluice/internal/wire"
)

// The codes of a Refusal: the API's error codes (docs/design.md §4.3).
const (
	// CodeUnknownUpstream: the job (or its tenant's policy, by default)
	// names an upstream that is not registered.
	CodeUnknownUpstream = "unknown_upstream"
	// CodeCostExceedsUpstreamBurst: the job's cost exceeds the burst of an
	// upstream it names; it would reach the upstream over its bound by
	// itself.
	CodeCostExceedsUpstreamBurst = "cost_exceeds_upstream_burst"
	// CodeNoWebhookSecret: a webhook job, or a job with a callback, of a
	// tenant the configuration gives no signing secret (Accepted.Unless).
	CodeNoWebhookSecret = "no_webhook_secret"
)

// Rules are the deployment's limits every job is checked against.
type Rules struct {
	// TaskQueues is the allow-list of asynq queues a task job may name.
	TaskQueues []string
	// EgressAllow opens address ranges the egress guard refuses
	// (webhook.CheckLiteral); nil: none.
	EgressAllow []netip.Prefix
}

// Tenant is what acceptance reads of the job's tenant. Job calls each
// method at most once per job, and Capacity only for a cost above
// policy.MaxBurst; an implementation may cache across jobs (a batch).
type Tenant interface {
	// Name is the tenant's id, as it appears in messages.
	Name() string
	// Capacity is min(burst, admit.burst) of the tenant's effective
	// policy: the largest cost it admits.
	Capacity(ctx context.Context) (int64, error)
	// DefaultUpstreams are the upstreams of the tenant's effective policy
	// (nil: none), which a job naming none consumes.
	DefaultUpstreams(ctx context.Context) ([]string, error)
	// Upstreams returns the registry's settings of each of names, in order.
	Upstreams(ctx context.Context, names []string) ([]Upstream, error)
	// SignsWebhooks reports whether the configuration gives the tenant a
	// webhook signing secret. When it does not, a job that needs one
	// carries the no_webhook_secret refusal (Accepted.Unless).
	SignsWebhooks() bool
}

// Upstream is one registered upstream as acceptance sees it.
type Upstream struct {
	// Found is false when no upstream of the name is registered.
	Found bool
	// Burst is the upstream's burst: the largest cost a job naming it may have.
	Burst int64
}

// Accepted is a job that passed Job.
type Accepted struct {
	// Spec is the job with its defaults filled in (cost, task queue) and
	// its upstreams resolved (the policy's default when it named none).
	Spec job.Spec
	// Attrs are the job's attributes for the store, upstreams resolved.
	job.Attrs
	// Sent is the canonical JSON of the job as the producer sent it:
	// before the policy's default upstreams are filled in, so that a retry
	// after a change of the default is still the same request.
	Sent []byte
	// Body is the canonical JSON to store: Sent with the policy's default
	// upstreams, or without "upstreams" when the job names none.
	Body []byte
	// Unless, when not nil, is the refusal the store applies unless the
	// tenant holds a live secret by API or its policy says unsigned
	// (store.Item.Unless): set for a webhook job, or a job with a
	// callback, of a tenant the configuration gives no secret.
	Unless *Refusal
}

// InvalidError is every problem with a job's fields (the API's 422
// invalid): Err joins *job.FieldError values with errors.Join.
type InvalidError struct {
	Err error
}

func (e *InvalidError) Error() string { return "invalid job: " + e.Err.Error() }
func (e *InvalidError) Unwrap() error { return e.Err }

// Refusal is a job whose fields are valid that its tenant's context
// refuses: Code (one of the Code constants) says why, Message for people.
type Refusal struct {
	Code    string
	Message string
}

func (r *Refusal) Error() string { return r.Code + ": " + r.Message }

// LookupError is a Tenant read that failed: nothing can be decided. Op names
// the read as the store's operations are named: get_policy (Capacity,
// DefaultUpstreams) or get_upstreams (Upstreams).
type LookupError struct {
	Op  string
	Err error
}

func (e *LookupError) Error() string { return "accept job: " + e.Op + ": " + e.Err.Error() }
func (e *LookupError) Unwrap() error { return e.Err }

// Job accepts spec, a job parsed with job.Parse, for tenant t under rules
// r. It returns the job to store, or:
//   - a *LookupError when a read of t fails (before anything else is
//     decided, or once the fields are valid);
//   - an *InvalidError with every problem of the fields at once: the checks
//     of job.Spec.Check (the cost against t's capacity when it exceeds
//     policy.MaxBurst; a smaller cost is checked against the policy when
//     stored) and the egress guard's refusal of an address literal in url
//     or callback.url (host names are checked again when dialled);
//   - a *Refusal, once the fields are valid, for an upstream (named by the
//     job, or by t's policy when the job names none) that is not
//     registered — all of them at once — or whose burst is below the
//     job's cost.
func Job(ctx context.Context, spec job.Spec, t Tenant, r Rules) (Accepted, error) {
	maxCost := int64(policy.MaxBurst)
	if spec.Cost != nil && *spec.Cost > policy.MaxBurst {
		c, err := t.Capacity(ctx)
		if err != nil {
			return Accepted{}, &LookupError{Op: "get_policy", Err: err}
		}
		maxCost = c
	}
	a, err := spec.Check(job.Rules{TaskQueues: r.TaskQueues, MaxCost: maxCost})
	err = errors.Join(err, egressRefusal(r, "url", spec.URL), egressRefusal(r, "callback.url", a.Callback))
	if err != nil {
		return Accepted{}, &InvalidError{Err: err}
	}
	out := Accepted{Sent: spec.Canonical()}
	defaulted, err := resolveUpstreams(ctx, t, &spec, &a)
	if err != nil {
		return Accepted{}, err
	}
	out.Body = out.Sent
	if defaulted || (spec.Upstreams != nil && len(spec.Upstreams) == 0) {
		// Stored with the policy's upstreams, or without the key when it
		// names none: a stored body's "upstreams" is final, absent is none,
		// and workers and sluicetask middleware from before #15 (which read
		// bodies strictly) meet the field only in jobs that name upstreams.
		if len(spec.Upstreams) == 0 {
			spec.Upstreams = nil
		}
		out.Body = spec.Canonical()
	}
	out.Spec, out.Attrs = spec, a
	if (spec.Type == wire.TypeWebhook || spec.Callback != nil) && !t.SignsWebhooks() {
		out.Unless = noWebhookSecret(t.Name())
	}
	return out, nil
}

// egressRefusal is a *job.FieldError for field when raw (a URL, "" =
// none) names an address literal the egress guard refuses, else nil.
func egressRefusal(r Rules, field, raw string) error {
	if raw == "" {
		return nil
	}
	if err := webhook.CheckLiteral(raw, r.EgressAllow); errors.Is(err, webhook.ErrEgressDenied) {
		return &job.FieldError{Field: field, Msg: "refused by the egress guard: " + err.Error()}
	}
	return nil
}

// resolveUpstreams settles the upstreams of a valid spec and its Attrs: a
// spec without "upstreams" takes its tenant policy's default (true when it
// did); then every name must be registered and its burst at least the
// job's cost.
func resolveUpstreams(ctx context.Context, t Tenant, spec *job.Spec, a *job.Attrs) (defaulted bool, err error) {
	if spec.Upstreams == nil {
		defaults, err := t.DefaultUpstreams(ctx)
		if err != nil {
			return false, &LookupError{Op: "get_policy", Err: err}
		}
		if len(defaults) > 0 {
			spec.Upstreams, a.Upstreams, defaulted = upstream.Sorted(defaults), upstream.Sorted(defaults), true
		}
	}
	if len(a.Upstreams) == 0 {
		return defaulted, nil
	}
	settings, err := t.Upstreams(ctx, a.Upstreams)
	if err != nil {
		return false, &LookupError{Op: "get_upstreams", Err: err}
	}
	from := "the job names"
	if defaulted {
		from = "the tenant's policy names (its default upstreams)"
	}
	var unknown []string
	for i, st := range settings {
		if !st.Found {
			unknown = append(unknown, a.Upstreams[i])
		}
	}
	if len(unknown) > 0 {
		return false, &Refusal{Code: CodeUnknownUpstream, Message: fmt.Sprintf(
			"upstreams: %s unknown upstreams %q; create them with PUT /v1/upstreams/{name}", from, unknown)}
	}
	for i, st := range settings {
		if a.Cost > st.Burst {
			return false, &Refusal{Code: CodeCostExceedsUpstreamBurst, Message: fmt.Sprintf(
				"cost: %d exceeds the burst %d of upstream %q (%s it): such a job would reach the upstream over its bound by itself; split the job or raise the upstream's burst",
				a.Cost, st.Burst, a.Upstreams[i], from)}
		}
	}
	return defaulted, nil
}

// noWebhookSecret is the refusal of a job that needs a signing secret
// tenant's configuration does not give.
func noWebhookSecret(tenant string) *Refusal {
	return &Refusal{Code: CodeNoWebhookSecret, Message: "tenant " + tenant +
		" has no webhook signing secret: create one (POST /v1/tenants/" + tenant + "/secrets), " +
		"configure tenants." + tenant + ".webhook_secrets, or set the policy's unsigned: true to send unsigned webhooks"}
}

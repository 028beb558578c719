package worker

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/secretbox"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/webhook"
	"github.com/sluicehq/sluice/internal/wire"
)

// WebhookExecutor sends webhook and http jobs with internal/webhook: it
// parses the stored job, delivers it (Standard Webhooks signed for webhook
// jobs) and classifies the result (docs/design.md §4.1, §4.2).
type WebhookExecutor struct {
	// Client sends every request: webhook.NewClient with the egress
	// allow-list (SSRF-safe, no redirects, no proxies). Required.
	Client *http.Client
	// Signing gives a webhook job's signing keys (secrets by API ∪ the
	// configuration's); when set, Secrets is not used. A tenant with no
	// key whose policy is not unsigned gets a permanent failure
	// ("no_webhook_secret"); keys that cannot be read now, a retry
	// ("signing_keys_unavailable"). Never an unsigned send by accident.
	Signing *SigningKeys
	// Secrets returns a tenant's decoded signing keys when Signing is nil;
	// nil or an empty result signs nothing.
	Secrets func(tenant string) [][]byte
	// UserAgent is "Sluice/<version>"; empty means version.UserAgent(), this
	// binary's (what the cmd/worker binary sends).
	UserAgent string
	// Results gives an http job's result settings (max_result_bytes,
	// result_headers); nil: the built-in defaults.
	Results *ResultSettings
	// Circuits holds back the jobs of a destination whose circuit is open
	// (docs/design.md §4.5; circuit.go) and records timeouts, connection
	// failures and answers; nil: every job is sent.
	Circuits *Circuits
	// Costs reads an attempt's actual cost from the response headers its
	// job's upstreams name (cost correction); nil: never (the reserved cost
	// stands).
	Costs *CostReader
}

var _ Executor = (*WebhookExecutor)(nil)

// NewWebhookExecutor builds cmd/worker's executor: a webhook.NewClient with
// the egress allow-list, keeping up to idlePerHost idle connections per host
// (the worker's concurrency: it never has more requests in flight, and a
// smaller pool re-dials a busy receiver at every request beyond it; 0:
// webhook.MaxIdleConnsPerHostDefault), and SigningKeys over the secrets by API in st
// (opened with ring; nil when secrets.key is not configured) and the
// configuration's (policy.SigningKeys of defaults and tenants), and
// ResultSettings over st's policies. It also
// returns the largest configured attempt timeout (for the shutdown rule).
// Close releases the client's idle connections.
func NewWebhookExecutor(allow []netip.Prefix, defaults policy.Overrides, tenants map[string]policy.Overrides,
	st interface {
		SecretReader
		PolicyReader
	}, ring *secretbox.Keyring, idlePerHost int) (*WebhookExecutor, time.Duration, error) {
	file, maxTimeout, err := policy.SigningKeys(defaults, tenants)
	if err != nil {
		return nil, 0, err
	}
	return &WebhookExecutor{Client: webhook.NewClient(webhook.ClientConfig{Allow: allow, MaxIdleConnsPerHost: idlePerHost}),
		Signing: &SigningKeys{Store: st, Keyring: ring, File: file}, Results: &ResultSettings{Store: st}}, maxTimeout, nil
}

// Close releases the client's idle connections.
func (e *WebhookExecutor) Close() { e.Client.CloseIdleConnections() }

// Execute runs one attempt of job with ctx's deadline as its timeout. A job
// body that does not parse is a permanent failure ("invalid_job"). The
// outcome carries the response body's first 4 KiB (the attempt log's
// excerpt) and, for an http job, its result (attemptResult: status,
// the allowed headers, the body up to max_result_bytes).
func (e *WebhookExecutor) Execute(ctx context.Context, cj store.ClaimedJob) wire.AttemptOutcome {
	spec, err := job.ParseStored(cj.Body)
	if err != nil {
		return wire.AttemptOutcome{Kind: wire.FinishPermanent, Error: "invalid_job"}
	}
	secrets, failed := e.signingKeys(ctx, cj, spec.Type)
	if failed != nil {
		return *failed
	}
	// Parsed once, for the circuit and the request; nil when it does not
	// parse (Deliver refuses the job).
	u, _ := url.Parse(spec.URL)
	ticket, deferred := e.Circuits.Before(ctx, u, cj)
	if deferred != nil {
		return *deferred
	}
	var maxBytes int
	var allow []string
	if spec.Type == wire.TypeHTTP {
		maxBytes, allow = e.Results.Of(ctx, cj.Tenant)
	}
	res := webhook.Deliver(ctx, e.Client, webhook.Request{
		ID:        cj.ID,
		Job:       spec,
		URL:       u,
		Secrets:   secrets,
		UserAgent: e.UserAgent,
		Now:       time.Now(),
		EventTime: cj.Created,
		BodyBytes: maxBytes,
	})
	o := res.Outcome(time.Now())
	e.Circuits.After(ctx, ticket, cj, o)
	if spec.Type == wire.TypeHTTP {
		o.Result = attemptResult(res, maxBytes, allow)
	}
	o.ActualCost = e.Costs.ActualCost(ctx, cj, res.Header)
	if res.Header != nil {
		o.Quota = webhook.PaceQuota(res.Header, time.Now(), cmp.Or(o.ActualCost, cj.Cost))
	}
	if o.Kind == wire.FinishThrottled && o.Pause == 0 && o.Quota != nil {
		// A 429 without Retry-After or an X-RateLimit reset (OpenAI's and
		// Anthropic's shapes): wait for the reported quota's reset.
		o.Pause = o.Quota.ResetIn
	}
	return o
}

// signingKeys returns the keys to sign claimed job cj (of typ) with — from
// the tenant signing state its claim gave, else through Signing.Keys —, or the
// outcome that ends the attempt unsent: a webhook job without a key (and
// not unsigned) is a permanent failure, unknown keys a retry.
func (e *WebhookExecutor) signingKeys(ctx context.Context, cj store.ClaimedJob, typ string) ([][]byte, *wire.AttemptOutcome) {
	if e.Signing == nil {
		if e.Secrets == nil {
			return nil, nil
		}
		return e.Secrets(cj.Tenant), nil
	}
	if typ != wire.TypeWebhook {
		return nil, nil // only webhook jobs are signed
	}
	var (
		keys [][]byte
		err  error
	)
	if cj.Signing != nil { // what the claim read: no read here
		keys, err = e.Signing.KeysFrom(cj.Tenant, *cj.Signing)
	} else {
		keys, err = e.Signing.Keys(ctx, cj.Tenant)
	}
	switch {
	case errors.Is(err, ErrNoSigningKey):
		return nil, &wire.AttemptOutcome{Kind: wire.FinishPermanent, Error: "no_webhook_secret"}
	case err != nil:
		return nil, &wire.AttemptOutcome{Kind: wire.FinishRetry, Error: "signing_keys_unavailable"}
	}
	return keys, nil
}

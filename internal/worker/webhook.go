package worker

import (
	"context"
	"net/http"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/webhook"
	"github.com/sluicehq/sluice/internal/wire"
)

// WebhookExecutor sends webhook and http jobs with internal/webhook: it
// parses the stored job, delivers it (Standard Webhooks signed for webhook
// jobs) and classifies the result (DESIGN §4.1, §4.2).
type WebhookExecutor struct {
	// Client sends every request: webhook.NewClient with the egress
	// allow-list (SSRF-safe, no redirects, no proxies). Required.
	Client *http.Client
	// Secrets returns a tenant's decoded signing keys; nil or an empty
	// result signs nothing.
	Secrets func(tenant string) [][]byte
	// UserAgent is "Sluice/<version>"; empty means version.UserAgent(), this
	// binary's (what the cmd/worker binary sends).
	UserAgent string
}

var _ Executor = (*WebhookExecutor)(nil)

// NewWebhookExecutor builds cmd/worker's executor: a webhook.NewClient with
// the egress allow-list, and the signing keys of the configuration's
// policies (policy.SigningKeys of defaults and tenants). It also returns the
// largest configured attempt timeout (for the shutdown rule). Close releases
// the client's idle connections.
func NewWebhookExecutor(allow []netip.Prefix, defaults policy.Overrides, tenants map[string]policy.Overrides) (*WebhookExecutor, time.Duration, error) {
	secrets, maxTimeout, err := policy.SigningKeys(defaults, tenants)
	if err != nil {
		return nil, 0, err
	}
	return &WebhookExecutor{Client: webhook.NewClient(webhook.ClientConfig{Allow: allow}), Secrets: secrets}, maxTimeout, nil
}

// Close releases the client's idle connections.
func (e *WebhookExecutor) Close() { e.Client.CloseIdleConnections() }

// Execute runs one attempt of job with ctx's deadline as its timeout. A job
// body that does not parse is a permanent failure ("invalid_job").
func (e *WebhookExecutor) Execute(ctx context.Context, cj store.ClaimedJob) wire.AttemptOutcome {
	spec, err := job.Parse(cj.Body)
	if err != nil {
		return wire.AttemptOutcome{Kind: wire.FinishPermanent, Error: "invalid_job"}
	}
	var secrets [][]byte
	if e.Secrets != nil {
		secrets = e.Secrets(cj.Tenant)
	}
	res := webhook.Deliver(ctx, e.Client, webhook.Request{
		ID:        cj.ID,
		Job:       spec,
		Secrets:   secrets,
		UserAgent: e.UserAgent,
		Now:       time.Now(),
		EventTime: cj.Created,
	})
	return res.Outcome(time.Now())
}

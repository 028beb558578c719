package main

import (
	"fmt"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/policy"
)

// secrets holds the verifiers of the tenants' webhook signatures, built from
// the configuration as the worker builds its signing keys: a configured
// tenant's webhook_secrets, else the defaults'.
type secrets struct {
	byTenant map[string][]*standardwebhooks.Webhook
	defaults []*standardwebhooks.Webhook
}

func newSecrets(cfg *config.Config) (*secrets, error) {
	defaults, err := verifiersOf(policy.Resolve(cfg.Defaults).WebhookSecrets)
	if err != nil {
		return nil, fmt.Errorf("defaults.webhook_secrets: %w", err)
	}
	s := &secrets{byTenant: make(map[string][]*standardwebhooks.Webhook, len(cfg.Tenants)), defaults: defaults}
	for tenant, o := range cfg.Tenants {
		if s.byTenant[tenant], err = verifiersOf(policy.Resolve(cfg.Defaults, o).WebhookSecrets); err != nil {
			return nil, fmt.Errorf("tenants.%s.webhook_secrets: %w", tenant, err)
		}
	}
	return s, nil
}

func verifiersOf(list policy.Secrets) ([]*standardwebhooks.Webhook, error) {
	out := make([]*standardwebhooks.Webhook, 0, len(list))
	for i, secret := range list {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			return nil, fmt.Errorf("secret %d: %w", i, err)
		}
		out = append(out, wh)
	}
	return out, nil
}

// verifiers returns tenant's verifiers; none means unsigned deliveries.
func (s *secrets) verifiers(tenant string) []*standardwebhooks.Webhook {
	if v, ok := s.byTenant[tenant]; ok {
		return v
	}
	return s.defaults
}

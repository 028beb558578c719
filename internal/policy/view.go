package policy

import (
	"encoding/json"
	"fmt"

	"github.com/sluicehq/sluice/internal/bucket"
)

// View is the API's JSON form of a resolved Policy: every field, with the
// same names and notations as Overrides, except that webhook secrets are
// replaced by their count. Its shape is part of the HTTP contract; fields
// are only ever added.
type View struct {
	Rate                bucket.Rate `json:"rate"`
	Burst               int64       `json:"burst"`
	Concurrency         int64       `json:"concurrency"`
	Weight              int64       `json:"weight"`
	Admit               AdmitView   `json:"admit"`
	MaxBacklog          int64       `json:"max_backlog"`
	MaxBacklogBytes     ByteSize    `json:"max_backlog_bytes"`
	Retry               RetryView   `json:"retry"`
	Timeout             Duration    `json:"timeout"`
	Adaptive            bool        `json:"adaptive"`
	WebhookSecretsCount int         `json:"webhook_secrets_count"`
}

// AdmitView is View's form of Admit.
type AdmitView struct {
	Rate  bucket.Rate `json:"rate"`
	Burst int64       `json:"burst"`
}

// RetryView is View's form of Retry.
type RetryView struct {
	MaxAttempts      int      `json:"max_attempts"`
	MinBackoff       Duration `json:"min_backoff"`
	MaxBackoff       Duration `json:"max_backoff"`
	MaxDoublings     int      `json:"max_doublings"`
	MaxRetryDuration Duration `json:"max_retry_duration"`
}

// View returns p's API view.
func (p Policy) View() View {
	return View{
		Rate:            p.Rate,
		Burst:           p.Burst,
		Concurrency:     p.Concurrency,
		Weight:          p.Weight,
		Admit:           AdmitView{Rate: p.Admit.Rate, Burst: p.Admit.Burst},
		MaxBacklog:      p.MaxBacklog,
		MaxBacklogBytes: ByteSize(p.MaxBacklogBytes),
		Retry: RetryView{
			MaxAttempts:      p.Retry.MaxAttempts,
			MinBackoff:       Duration(p.Retry.MinBackoff),
			MaxBackoff:       Duration(p.Retry.MaxBackoff),
			MaxDoublings:     p.Retry.MaxDoublings,
			MaxRetryDuration: Duration(p.Retry.MaxRetryDuration),
		},
		Timeout:             Duration(p.Timeout),
		Adaptive:            p.Adaptive,
		WebhookSecretsCount: len(p.WebhookSecrets),
	}
}

// MarshalJSON implements json.Marshaler with View, so encoding a Policy never
// emits its secrets.
func (p Policy) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(p.View())
	if err != nil {
		return nil, fmt.Errorf("encode policy view: %w", err)
	}
	return b, nil
}

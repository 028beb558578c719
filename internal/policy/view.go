package policy

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
)

// View is the JSON form of a resolved Policy that the API returns (the
// "policy" of GET /v1/tenants/{tenant} and of the PUT policy reply): every
// field except the webhook secrets, with the names and notations of
// Overrides, so a client may send back what it got. Rates are shown as the
// scripts hold them, by emission interval (see IntervalRate). Its shape is
// part of the HTTP contract; fields are only ever added.
type View struct {
	Rate            IntervalRate `json:"rate"`
	Burst           int64        `json:"burst"`
	Concurrency     int64        `json:"concurrency"`
	Weight          int64        `json:"weight"`
	Admit           AdmitView    `json:"admit"`
	MaxBacklog      int64        `json:"max_backlog"`
	MaxBacklogBytes ByteSize     `json:"max_backlog_bytes"`
	Retry           RetryView    `json:"retry"`
	Timeout         Duration     `json:"timeout"`
	Adaptive        bool         `json:"adaptive"`
	Unsigned        bool         `json:"unsigned"`
	DisableOnGone   bool         `json:"disable_on_gone"`
	Pacing          Pacing       `json:"pacing"`
	MaxResultBytes  ByteSize     `json:"max_result_bytes"`
	ResultHeaders   []string     `json:"result_headers"`
	// Upstreams are the default upstreams of the tenant's jobs; [] none.
	Upstreams []string `json:"upstreams"`
}

// AdmitView is View's form of Admit.
type AdmitView struct {
	Rate  IntervalRate `json:"rate"`
	Burst int64        `json:"burst"`
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
		Rate:            IntervalRate(p.Rate.IntervalMicros()),
		Burst:           p.Burst,
		Concurrency:     p.Concurrency,
		Weight:          p.Weight,
		Admit:           AdmitView{Rate: IntervalRate(p.Admit.Rate.IntervalMicros()), Burst: p.Admit.Burst},
		MaxBacklog:      p.MaxBacklog,
		MaxBacklogBytes: ByteSize(p.MaxBacklogBytes),
		Retry: RetryView{
			MaxAttempts:      p.Retry.MaxAttempts,
			MinBackoff:       Duration(p.Retry.MinBackoff),
			MaxBackoff:       Duration(p.Retry.MaxBackoff),
			MaxDoublings:     p.Retry.MaxDoublings,
			MaxRetryDuration: Duration(p.Retry.MaxRetryDuration),
		},
		Timeout:        Duration(p.Timeout),
		Adaptive:       p.Adaptive,
		Unsigned:       p.Unsigned,
		DisableOnGone:  p.DisableOnGone,
		Pacing:         p.Pacing,
		MaxResultBytes: ByteSize(p.MaxResultBytes),
		ResultHeaders:  append([]string{}, p.ResultHeaders...),
		Upstreams:      append([]string{}, p.Upstreams...),
	}
}

// MarshalJSON implements json.Marshaler with View plus
// "webhook_secrets_count", so encoding (or logging) a Policy never emits its
// secrets.
func (p Policy) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(struct {
		View
		WebhookSecretsCount int `json:"webhook_secrets_count"`
	}{p.View(), len(p.WebhookSecrets)})
	if err != nil {
		return nil, fmt.Errorf("encode policy view: %w", err)
	}
	return b, nil
}

// IntervalRate is a rate as the store's scripts hold it: an emission
// interval in µs per token (bucket.Rate.IntervalMicros). Rates with the same
// interval ("1/s", "60/m") are the same policy to the scripts.
type IntervalRate int64

// Rate returns the rate "N/s", "N/m", "N/h" or "N/d" (the first unit that fits, with
// the smallest N) whose emission interval is exactly r, and false when no
// such rate exists. Every interval of a bucket.Rate has one.
func (r IntervalRate) Rate() (bucket.Rate, bool) {
	t := int64(r)
	if t < 1 {
		return bucket.Rate{}, false
	}
	for _, per := range []time.Duration{time.Second, time.Minute, time.Hour, bucket.Day} {
		rate := bucket.Rate{Tokens: (per.Microseconds() + t - 1) / t, Per: per}
		if rate.IntervalMicros() == t {
			return rate, true
		}
	}
	return bucket.Rate{}, false
}

// MarshalJSON writes r as a rate string ("50/s") when one has exactly this
// interval, else as a number of tokens per second (10⁶ / r), 0 when r < 1.
func (r IntervalRate) MarshalJSON() ([]byte, error) {
	if rate, ok := r.Rate(); ok {
		return json.Marshal(rate.String())
	}
	if r < 1 {
		return []byte("0"), nil
	}
	return json.Marshal(1e6 / float64(r))
}

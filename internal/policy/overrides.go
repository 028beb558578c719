package policy

import (
	"io"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/wire"
)

// Overrides is a sparse policy: a nil field (nil pointer, nil slice) is unset
// and inherits from the layer below. It is what the configuration's
// `defaults` and `tenants.<id>` entries and the body of
// PUT /v1/tenants/{t}/policy hold, and what Redis stores.
//
// JSON and YAML use exactly the snake_case names below; rates are
// bucket.Rate text ("50/s"), durations Go duration strings ("15s"), sizes
// ByteSize text ("256MiB", or a plain number of bytes). Unknown fields are
// errors when decoded with DecodeJSON or a yaml.v3 Decoder with KnownFields.
// WebhookSecrets set to an empty, non-nil list means "no secrets", which JSON
// keeps distinct from unset (omitzero).
type Overrides struct {
	Rate            *bucket.Rate   `json:"rate,omitempty" yaml:"rate,omitempty"`
	Burst           *int64         `json:"burst,omitempty" yaml:"burst,omitempty"`
	Concurrency     *int64         `json:"concurrency,omitempty" yaml:"concurrency,omitempty"`
	Weight          *int64         `json:"weight,omitempty" yaml:"weight,omitempty"`
	Admit           AdmitOverrides `json:"admit,omitzero" yaml:"admit,omitempty"`
	MaxBacklog      *int64         `json:"max_backlog,omitempty" yaml:"max_backlog,omitempty"`
	MaxBacklogBytes *ByteSize      `json:"max_backlog_bytes,omitempty" yaml:"max_backlog_bytes,omitempty"`
	Retry           RetryOverrides `json:"retry,omitzero" yaml:"retry,omitempty"`
	Timeout         *Duration      `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	Adaptive        *bool          `json:"adaptive,omitempty" yaml:"adaptive,omitempty"`
	Unsigned        *bool          `json:"unsigned,omitempty" yaml:"unsigned,omitempty"`
	DisableOnGone   *bool          `json:"disable_on_gone,omitempty" yaml:"disable_on_gone,omitempty"`
	Pacing          *Pacing        `json:"pacing,omitempty" yaml:"pacing,omitempty"`
	WebhookSecrets  Secrets        `json:"webhook_secrets,omitzero" yaml:"webhook_secrets,omitempty"`
	MaxResultBytes  *ByteSize      `json:"max_result_bytes,omitempty" yaml:"max_result_bytes,omitempty"`
	// ResultHeaders set to an empty, non-nil list keeps no header.
	ResultHeaders []string `json:"result_headers,omitzero" yaml:"result_headers,omitempty"`
	// Upstreams set to an empty, non-nil list names none (over a default
	// layer's).
	Upstreams []string `json:"upstreams,omitzero" yaml:"upstreams,omitempty"`
}

// AdmitOverrides is the sparse form of Admit.
type AdmitOverrides struct {
	Rate  *bucket.Rate `json:"rate,omitempty" yaml:"rate,omitempty"`
	Burst *int64       `json:"burst,omitempty" yaml:"burst,omitempty"`
}

// RetryOverrides is the sparse form of Retry.
type RetryOverrides struct {
	MaxAttempts      *int      `json:"max_attempts,omitempty" yaml:"max_attempts,omitempty"`
	MinBackoff       *Duration `json:"min_backoff,omitempty" yaml:"min_backoff,omitempty"`
	MaxBackoff       *Duration `json:"max_backoff,omitempty" yaml:"max_backoff,omitempty"`
	MaxDoublings     *int      `json:"max_doublings,omitempty" yaml:"max_doublings,omitempty"`
	MaxRetryDuration *Duration `json:"max_retry_duration,omitempty" yaml:"max_retry_duration,omitempty"`
}

// Resolve merges layers over Builtin in order, each set field replacing the
// value below it: Resolve(defaults, tenant) gives tenant's policy, with
// defaults being the `*` overrides. The result is not validated.
func Resolve(layers ...Overrides) Policy {
	p := Builtin()
	for _, o := range layers {
		o.applyTo(&p)
	}
	return p
}

func (o Overrides) applyTo(p *Policy) {
	set(&p.Rate, o.Rate)
	set(&p.Burst, o.Burst)
	set(&p.Concurrency, o.Concurrency)
	set(&p.Weight, o.Weight)
	set(&p.Admit.Rate, o.Admit.Rate)
	set(&p.Admit.Burst, o.Admit.Burst)
	set(&p.MaxBacklog, o.MaxBacklog)
	if o.MaxBacklogBytes != nil {
		p.MaxBacklogBytes = int64(*o.MaxBacklogBytes)
	}
	set(&p.Retry.MaxAttempts, o.Retry.MaxAttempts)
	setDuration(&p.Retry.MinBackoff, o.Retry.MinBackoff)
	setDuration(&p.Retry.MaxBackoff, o.Retry.MaxBackoff)
	set(&p.Retry.MaxDoublings, o.Retry.MaxDoublings)
	setDuration(&p.Retry.MaxRetryDuration, o.Retry.MaxRetryDuration)
	setDuration(&p.Timeout, o.Timeout)
	set(&p.Adaptive, o.Adaptive)
	set(&p.Unsigned, o.Unsigned)
	set(&p.DisableOnGone, o.DisableOnGone)
	set(&p.Pacing, o.Pacing)
	if o.WebhookSecrets != nil {
		p.WebhookSecrets = slices.Clone(o.WebhookSecrets)
	}
	if o.MaxResultBytes != nil {
		p.MaxResultBytes = int64(*o.MaxResultBytes)
	}
	if o.ResultHeaders != nil {
		p.ResultHeaders = slices.Clone(o.ResultHeaders)
	}
	if o.Upstreams != nil {
		p.Upstreams = slices.Clone(o.Upstreams)
	}
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

func setDuration(dst *time.Duration, v *Duration) {
	if v != nil {
		*dst = time.Duration(*v)
	}
}

// DecodeJSON reads one JSON object of Overrides from r, rejecting unknown
// fields and trailing data. It does not validate; call Validate.
func DecodeJSON(r io.Reader) (Overrides, error) {
	return wire.DecodeObject[Overrides](r, "policy overrides")
}

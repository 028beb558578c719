package client

import (
	"context"
	"encoding/json"
	"net/http"
)

// Circuit is a destination's circuit (GET /v1/circuits): a destination
// (scheme://host:port) that keeps timing out or refusing connections is
// held back, its jobs waiting without using attempts, until one probe gets
// an answer.
type Circuit struct {
	Destination string `json:"destination"` // "https://api.example.com:443"
	State       string `json:"state"`       // "closed" (failures counted), "open" or "half_open"
	Failures    int    `json:"failures"`    // consecutive timeouts or connection failures
	// Until is the backoff's end (open) or the probe's deadline (half_open),
	// RFC 3339; nil when closed.
	Until          *string `json:"until"`
	BackoffSeconds float64 `json:"backoff_seconds"` // the current backoff; 0 when closed
	ChangedAt      *string `json:"changed_at"`
}

// Circuits returns every destination whose circuit is open, half-open or
// counting failures, by destination (GET /v1/circuits; only destinations
// that failed are stored, so the list is short). The error is an *Error
// matching ErrUnauthorized, ErrRateLimited or ErrUnavailable; or ctx's
// error.
func (c *Client) Circuits(ctx context.Context) ([]Circuit, error) {
	v, err := getJSON[struct {
		Circuits []Circuit       `json:"circuits"`
		Raw      json.RawMessage `json:"-"`
	}](ctx, c, &request{method: http.MethodGet, path: "/v1/circuits"}, "circuits")
	if err != nil {
		return nil, err
	}
	return v.Circuits, nil
}

// CloseCircuit closes destination's circuit by hand, its failures
// forgotten (POST /v1/circuits:close, admin keys); the jobs it held come
// back at their due times. destination is as Circuits lists it. The error
// is an *Error matching ErrInvalid (an empty or too long destination),
// ErrNotFound (the destination has no circuit), ErrForbidden,
// ErrUnauthorized, ErrRateLimited or ErrUnavailable; or ctx's error.
func (c *Client) CloseCircuit(ctx context.Context, destination string) error {
	_, err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/circuits:close",
		body: map[string]string{"destination": destination}})
	return err
}

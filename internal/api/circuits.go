package api

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

// circuitView is a destination's circuit (docs/design.md §4.5) in GET
// /v1/circuits.
type circuitView struct {
	Destination string `json:"destination"`
	State       string `json:"state"` // closed (failures counted) | open | half_open
	Failures    int    `json:"failures"`
	// Until is the backoff's end (open) or the probe's deadline
	// (half_open); null when closed.
	Until *string `json:"until"`
	// BackoffSeconds is the current backoff; 0 when closed.
	BackoffSeconds float64 `json:"backoff_seconds"`
	ChangedAt      *string `json:"changed_at"`
}

// openDestinationView is a destination a tenant's jobs wait for, in the
// tenant view's open_destinations.
type openDestinationView struct {
	Destination string `json:"destination"`
	// State is the circuit's now: open, half_open, or closed when it has
	// closed since (the jobs come back at jobs_until all the same).
	State string `json:"state"`
	// Until is the circuit's backoff end or probe deadline; null when closed.
	Until *string `json:"until"`
	// JobsUntil is when the tenant's last deferred job to it comes back.
	JobsUntil *string `json:"jobs_until"`
}

func circuitViewOf(c store.Circuit) circuitView {
	return circuitView{Destination: c.Destination, State: string(c.State), Failures: c.Failures,
		Until: timeString(c.Until), BackoffSeconds: c.Backoff.Seconds(), ChangedAt: timeString(c.Changed)}
}

// listCircuits is GET /v1/circuits: every destination whose circuit is
// open, half-open or counting failures (at most a few: only destinations
// that failed are stored), by destination.
func (s *Server) listCircuits(r *http.Request, _ *call) (int, any, error) {
	cs, _, err := s.opts.Store.Circuits(r.Context())
	if err != nil {
		return 0, nil, s.storeError(r, "list_circuits", err)
	}
	out := struct {
		Circuits []circuitView `json:"circuits"`
	}{Circuits: []circuitView{}}
	for _, c := range cs {
		out.Circuits = append(out.Circuits, circuitViewOf(c))
	}
	return http.StatusOK, out, nil
}

// closeCircuitRequest is POST /v1/circuits:close's body.
type closeCircuitRequest struct {
	Destination string `json:"destination"`
}

// closeCircuit is POST /v1/circuits:close (admin keys): closes the
// destination's circuit by hand, its failures forgotten; 404 when it has
// none. The jobs it deferred come back at their due times.
func (s *Server) closeCircuit(r *http.Request, c *call) (int, any, error) {
	if !c.key.Admin {
		return 0, nil, errorf(http.StatusForbidden, CodeForbidden, "API key %q is not an admin key", c.key.Name)
	}
	var req closeCircuitRequest
	if err := decodeJSON(c.w, r, s.opts.MaxBodyBytes, &req); err != nil {
		return 0, nil, err
	}
	if req.Destination == "" || len(req.Destination) > store.MaxDestinationLen {
		return 0, nil, errorf(http.StatusUnprocessableEntity, CodeInvalid,
			"destination: want a circuit's destination (\"https://api.example.com:443\", as GET /v1/circuits lists it), 1 … %d bytes", store.MaxDestinationLen)
	}
	ok, err := s.opts.Store.CloseCircuit(r.Context(), req.Destination)
	if err != nil {
		return 0, nil, s.storeError(r, "close_circuit", err)
	}
	if !ok {
		return 0, nil, errorf(http.StatusNotFound, CodeNotFound, "destination %q has no circuit", req.Destination)
	}
	return http.StatusOK, map[string]string{"destination": req.Destination, "state": string(store.CircuitClosed)}, nil
}

// openDestinations is tenant's open_destinations: the destinations its
// deferred jobs wait for, with their circuits' state now.
func (s *Server) openDestinations(r *http.Request, tenant string, now time.Time) ([]openDestinationView, error) {
	tc, err := s.opts.Store.TenantCircuits(r.Context(), tenant, now)
	if err != nil || len(tc) == 0 {
		return []openDestinationView{}, err
	}
	cs, _, err := s.opts.Store.Circuits(r.Context())
	if err != nil {
		return nil, err
	}
	state := map[string]store.Circuit{}
	for _, c := range cs {
		state[c.Destination] = c
	}
	out := make([]openDestinationView, 0, len(tc))
	for _, t := range tc {
		v := openDestinationView{Destination: t.Destination, State: string(store.CircuitClosed), JobsUntil: timeString(t.Until)}
		if c, ok := state[t.Destination]; ok {
			v.State, v.Until = string(c.State), timeString(c.Until)
		}
		out = append(out, v)
	}
	return out, nil
}

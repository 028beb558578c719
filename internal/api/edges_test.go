package api

import (
	"net/http"
	"strings"
	"testing"
)

// TestRateAboveTheBoundRefused: a rate faster than one token per µs is a
// 422 naming the bound for tenants and upstreams alike, and nothing is
// stored; the bound itself is accepted and shown as given.
func TestRateAboveTheBoundRefused(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	for _, tc := range []struct{ name, method, path, field string }{
		{"tenant", "PUT", "/v1/tenants/acme-fast/policy", "rate"},
		{"tenant admit", "PUT", "/v1/tenants/acme-fast/policy", "admit"},
		{"upstream", "PUT", "/v1/upstreams/fast", "rate"},
	} {
		for _, rate := range []string{"1000000000/s", "1000001/s", "60000001/m"} {
			body := `{"rate":"` + rate + `"}`
			if tc.field == "admit" {
				body = `{"admit":{"rate":"` + rate + `","burst":1}}`
			}
			r := f.send(t, tc.method, tc.path, adminToken, strings.NewReader(body))
			if r.status != http.StatusUnprocessableEntity || !strings.Contains(errorMessage(r), "1000000/s") {
				t.Errorf("%s %s: %d %q, want 422 naming the bound 1000000/s", tc.name, rate, r.status, errorMessage(r))
			}
		}
		if r := f.get(t, tc.path, adminToken); tc.name == "upstream" && r.status != http.StatusNotFound {
			t.Errorf("%s after the refusals: %d, want 404 (nothing stored)", tc.name, r.status)
		}
	}
	if r := f.send(t, "PUT", "/v1/tenants/acme-fast/policy", adminToken, strings.NewReader(`{"rate":"1000000/s"}`)); r.status != http.StatusOK {
		t.Fatalf("the bound 1000000/s: %d %v", r.status, r.body)
	}
	r := f.get(t, "/v1/tenants/acme-fast", adminToken)
	pol, _ := r.body["policy"].(map[string]any)
	if pol["rate"] != "1000000/s" {
		t.Errorf("tenant policy rate %v, want 1000000/s as given", pol["rate"])
	}
}

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

// TestMalformedQueryIsOneStatus: every list route answers a malformed
// query parameter with 400 malformed.
func TestMalformedQueryIsOneStatus(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	for _, path := range []string{
		"/v1/tenants?cursor=%21%21", "/v1/tenants?limit=0", "/v1/tenants?limit=x",
		"/v1/tenants/acme-q/dead?cursor=%21%21", "/v1/tenants/acme-q/dead?cursor=12-x", "/v1/tenants/acme-q/dead?limit=0", "/v1/tenants/acme-q/dead?limit=x",
		"/v1/upstreams?cursor=%21%21", "/v1/upstreams?limit=0",
		"/v1/tenants/acme-q/live?since=x",
	} {
		if r := f.get(t, path, adminToken); r.status != http.StatusBadRequest || errorCode(r) != CodeMalformed {
			t.Errorf("GET %s: %d %q, want 400 malformed", path, r.status, errorCode(r))
		}
	}
}

// TestValidationSpeaksTheAPI: messages name JSON types and the API's
// fields, never a Go type or a Redis script.
func TestValidationSpeaksTheAPI(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	f.createUpstream(t, "sms")
	for _, tc := range []struct {
		name, path, body, want string
	}{
		{"array body to dead:replay", "/v1/tenants/acme-m/dead:replay", `[1,2]`, "body: want an object, got JSON array"},
		{"string limit to dead:replay", "/v1/tenants/acme-m/dead:replay", `{"limit":"5"}`, "limit: want an integer, got JSON string"},
		{"array body to a job", "/v1/tenants/acme-m/jobs", `[1]`, "body: want an object, got JSON array"},
		{"array body to a pause", "/v1/upstreams/sms/pause", `["30s"]`, "body: want an object, got JSON array"},
		{"pause for 1ns", "/v1/upstreams/sms/pause", `{"for":"1ns"}`, `for: want a duration ("30s") of 1s … `},
		{"pause for 999ms", "/v1/upstreams/sms/pause", `{"for":"999ms"}`, `for: want a duration ("30s") of 1s … `},
	} {
		r := f.post(t, tc.path, adminToken, tc.body)
		msg := errorMessage(r)
		if r.status != http.StatusUnprocessableEntity || !strings.HasPrefix(msg, tc.want) {
			t.Errorf("%s: %d %q, want 422 %q…", tc.name, r.status, msg, tc.want)
		}
		for _, leak := range []string{"script ", "api.", "[]", "int64", "string;", "Go value"} {
			if strings.Contains(msg, leak) {
				t.Errorf("%s: message %q names %q", tc.name, msg, leak)
			}
		}
	}
	if r := f.post(t, "/v1/upstreams/sms/pause", adminToken, `{"for":"1s"}`); r.status != http.StatusOK {
		t.Errorf("pause for the minimum 1s: %d %v", r.status, r.body)
	}
}

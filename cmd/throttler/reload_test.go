package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
)

// reloadConfig is a configuration with a tenant, an upstream, a checkable
// limit and two keys; extra is appended.
func reloadConfig(prefix, tenantRate, upstreamRate string, searchBurst int, extra string) string {
	return `
listen: 127.0.0.1:0
redis: {prefix: ` + prefix + `}
auth:
  keys:
    - {name: ops, key: ops-key, tenants: ["*"], admin: true}
` + extra + `
tenants:
  acme: {rate: ` + tenantRate + `, webhook_secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]}
upstreams:
  sms: {rate: ` + upstreamRate + `}
limits:
  search: {algorithm: gcra, rate: 1/m, burst: ` + itoa(searchBurst) + `}
log: {format: json}
`
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestReloadBySignalAndRoute: SIGHUP applies a changed file — a new key,
// a tenant's policy, an upstream, a limit — without a restart, logging
// each change once and no secret; POST /v1/admin/reload refuses a file with
// problems (or with a change that needs a restart) as a whole, listing
// every problem, and the running configuration stays.
func TestReloadBySignalAndRoute(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(reloadConfig(prefix, "5/s", "10/s", 2, ""))
	env := map[string]string{"SLUICE_REDIS_URL": redistest.URL()}
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal, 1)
	addrCh, done := make(chan string, 1), make(chan error, 1)
	var logs redistest.SyncBuffer
	go func() {
		done <- run(ctx, []string{"--config", path}, func(k string) string { return env[k] }, &logs, func(a string) { addrCh <- a }, hup)
	}()
	t.Cleanup(func() { cancel(); <-done })
	var addr string
	select {
	case addr = <-addrCh:
	case err := <-done:
		t.Fatalf("run ended before listening: %v\n%s", err, logs.String())
	case <-time.After(20 * time.Second):
		t.Fatal("throttler did not start listening within 20s")
	}
	call := func(method, path, token, body string) (int, map[string]any, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		return resp.StatusCode, m, resp.Header
	}
	field := func(m map[string]any, keys ...string) any {
		var v any = m
		for _, k := range keys {
			mm, _ := v.(map[string]any)
			v = mm[k]
		}
		return v
	}
	if st, _, _ := call("GET", "/v1/tenants/acme", "new-key", ""); st != http.StatusUnauthorized {
		t.Fatalf("a key not yet in the file: %d, want 401", st)
	}

	// SIGHUP applies a changed file.
	write(reloadConfig(prefix, "7/s", "20/s", 5, "    - {name: newcomer, key: new-key, tenants: [\"acme\"], limits: [search]}\n"))
	hup <- syscall.SIGHUP
	redistest.PollMsg(t, 5*time.Second, func() (bool, string) {
		st, m, _ := call("GET", "/v1/tenants/acme", "new-key", "")
		return st == http.StatusOK, fmt.Sprint(st, m)
	})
	redistest.Poll(t, time.Second, "the new key accepted after SIGHUP", func() bool {
		st, _, _ := call("GET", "/v1/tenants/acme", "new-key", "")
		return st == http.StatusOK
	})
	if _, m, _ := call("GET", "/v1/tenants/acme", "ops-key", ""); field(m, "policy", "rate") != "7/s" {
		t.Errorf("tenant policy after the reload: %v, want rate 7/s", field(m, "policy"))
	}
	if _, m, _ := call("GET", "/v1/upstreams/sms", "ops-key", ""); field(m, "config", "rate") != "20/s" {
		t.Errorf("upstream after the reload: %v, want rate 20/s", m)
	}
	if _, _, h := call("POST", "/v1/limits/search/check", "new-key", `{"key":"k","cost":1}`); !strings.Contains(h.Get("RateLimit-Policy"), `"search";q=5`) {
		t.Errorf("search limit after the reload: RateLimit-Policy %q, want burst 5", h.Get("RateLimit-Policy"))
	}
	for _, change := range []string{"auth.keys.newcomer: added", "tenants.acme: changed", "upstreams.sms: changed", "limits.search: changed"} {
		if n := strings.Count(logs.String(), `"change":"`+change+`"`); n != 1 {
			t.Errorf("change %q logged %d times, want once:\n%s", change, n, logs.String())
		}
	}
	for _, secret := range []string{"new-key", config.HashKey("new-key"), "whsec_"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the logs hold a secret (%q)", secret[:min(len(secret), 12)])
		}
	}

	// A file with problems is refused as a whole, every problem listed.
	write(reloadConfig(prefix, "0/s", "1000000000/s", 0, "    - {name: other, key: other-key, tenants: [\"*\"]}\n"))
	st, m, _ := call("POST", "/v1/admin/reload", "ops-key", "")
	problems, _ := field(m, "error", "problems").([]any)
	if st != http.StatusUnprocessableEntity || len(problems) != 2 || !strings.Contains(problems[1].(string), "above the maximum 1000000/s") {
		t.Fatalf("reload of a bad file: %d %v, want 422 with both problems", st, m)
	}
	if n := strings.Count(logs.String(), "configuration reload refused"); n != 2 {
		t.Errorf("%d problems logged, want each of the 2", n)
	}
	if st, _, _ := call("GET", "/v1/tenants/acme", "other-key", ""); st != http.StatusUnauthorized {
		t.Errorf("a key of the refused file: %d, want 401", st)
	}
	if st, _, _ := call("GET", "/v1/tenants/acme", "new-key", ""); st != http.StatusOK {
		t.Errorf("the running configuration's key after a refusal: %d, want 200", st)
	}
	// A change that needs a restart is a problem too.
	write(strings.Replace(reloadConfig(prefix, "7/s", "20/s", 5, ""), "log: {format: json}", "log: {format: json, level: debug}", 1))
	st, m, _ = call("POST", "/v1/admin/reload", "ops-key", "")
	if problems, _ := field(m, "error", "problems").([]any); st != http.StatusUnprocessableEntity || len(problems) != 1 || !strings.HasPrefix(problems[0].(string), "log: changed") {
		t.Errorf("reload changing log: %d %v, want 422 naming log", st, m)
	}
	// A file key named like a key by API is a problem.
	if st, _, _ := call("POST", "/v1/keys", "ops-key", `{"name":"byapi"}`); st != http.StatusCreated {
		t.Fatalf("create a key by API: %d", st)
	}
	write(reloadConfig(prefix, "7/s", "20/s", 5, "    - {name: byapi, key: clash-key}\n"))
	st, m, _ = call("POST", "/v1/admin/reload", "ops-key", "")
	if problems, _ := field(m, "error", "problems").([]any); st != http.StatusUnprocessableEntity || len(problems) != 1 || !strings.HasPrefix(problems[0].(string), "auth.keys[1].name: a key by API") {
		t.Errorf("reload with a file key named like a key by API: %d %v, want 422 naming it", st, m)
	}
	if st, _, _ := call("POST", "/v1/admin/reload", "new-key", ""); st != http.StatusForbidden {
		t.Errorf("reload by a non-admin key: %d, want 403", st)
	}
	// The same file again: 200, no change.
	write(reloadConfig(prefix, "7/s", "20/s", 5, "    - {name: newcomer, key: new-key, tenants: [\"acme\"], limits: [search]}\n"))
	if st, m, _ := call("POST", "/v1/admin/reload", "ops-key", ""); st != http.StatusOK || len(m["changes"].([]any)) != 0 {
		t.Errorf("reload of the running file: %d %v, want 200 and no change", st, m)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/webhook"
	"github.com/sluicehq/sluice/internal/wire"
)

func TestMain(m *testing.M) { redistest.Main(m) }

const (
	secret  = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	rotated = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// TestWorkerDeliversSignedWebhooksServesMetricsAndStops runs the binary's
// run with a configuration file: a job released by a dispatcher on the same
// prefix reaches a loopback receiver signed with the tenant's secret, the
// metrics are served, and cancelling the context stops the worker cleanly.
func TestWorkerDeliversSignedWebhooksServesMetricsAndStops(t *testing.T) {
	t.Parallel()
	type delivery struct {
		header http.Header
		body   []byte
	}
	got := make(chan delivery, 1)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- delivery{r.Header.Clone(), body}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()

	prefix := redistest.Prefix(t)
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	cfg := `
redis: {prefix: ` + prefix + `, shards: 2}
tenants:
  acme: {webhook_secrets: ["` + secret + `"]}
egress: {allow: ["127.0.0.0/8"]}
worker: {concurrency: 5, shutdown_timeout: 1s}
log: {format: json, level: debug}
`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SLUICE_REDIS_URL": redistest.URL()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs redistest.SyncBuffer
	ready := make(chan string, 1)
	done := make(chan error, 1)
	hup := make(chan os.Signal, 1)
	go func() {
		done <- run(ctx, []string{"--config", cfgPath, "--metrics-listen", "127.0.0.1:0"},
			func(k string) string { return env[k] }, &logs, func(addr string) { ready <- addr }, hup)
	}()
	var metricsAddr string
	select {
	case metricsAddr = <-ready:
	case err := <-done:
		t.Fatalf("run ended early: %v\n%s", err, logs.String())
	case <-time.After(20 * time.Second):
		t.Fatal("worker not ready within 20s")
	}
	if !strings.Contains(logs.String(), "worker.shutdown_timeout raised") {
		t.Errorf("a 1s shutdown timeout was not raised:\n%s", logs.String())
	}

	// A dispatcher on the same Redis and prefix releases one job to it.
	rdb, _ := redistest.New(t)
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	spec := job.Spec{Type: wire.TypeWebhook, URL: recv.URL + "/hook", Event: "invoice.paid", Payload: json.RawMessage(`{"n":7}`)}
	rs, err := st.Enqueue(ctx, "acme", []store.Item{{Type: wire.TypeWebhook, Body: spec.Canonical()}})
	if err != nil || rs[0].Outcome != store.Accepted {
		t.Fatalf("enqueue: %+v, %v", rs, err)
	}
	d, err := dispatch.New(dispatch.Config{Store: st, Asynq: asynq.NewClientFromRedisClient(rdb), Redis: rdb, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer d.Stop()

	// worker.concurrency 5 and the default fetchers, min(4, 5): four asynq
	// servers sharing the 5 job slots (2, 1, 1, 1) on the hand-off queues
	// and the per-job ones.
	var conc []int
	redistest.Poll(t, 10*time.Second, "four asynq servers on the hand-off and webhook queues", func() bool {
		servers, err := asynq.NewInspectorFromRedisClient(rdb).Servers()
		if err != nil {
			t.Fatal(err)
		}
		conc = conc[:0]
		for _, s := range servers {
			_, webhook := s.Queues[wire.WebhookQueue(prefix)]
			_, handoff := s.Queues[wire.HandoffQueue(prefix, wire.HandoffQueues-1)]
			if webhook && handoff {
				conc = append(conc, s.Concurrency)
			}
		}
		return len(conc) == 4
	})
	slices.Sort(conc)
	if !slices.Equal(conc, []int{1, 1, 1, 2}) {
		t.Fatalf("asynq servers' concurrency %v, want [1 1 1 2]", conc)
	}

	var del delivery
	select {
	case del = <-got:
	case <-time.After(10 * time.Second):
		t.Fatalf("no delivery within 10s\n%s", logs.String())
	}
	if id := del.header.Get("webhook-id"); id != rs[0].ID {
		t.Fatalf("webhook-id %q, want %q", id, rs[0].ID)
	}
	ts, _ := strconv.ParseInt(del.header.Get("webhook-timestamp"), 10, 64)
	keys, _ := policy.Secrets{secret}.Keys()
	if want := webhook.Sign(keys, rs[0].ID, time.Unix(ts, 0), del.body); del.header.Get("webhook-signature") != want || want == "" {
		t.Fatalf("signature %q, want %q", del.header.Get("webhook-signature"), want)
	}

	// SIGHUP: the file's rotated secret signs the next webhook, no restart;
	// a file with problems is refused, the running secret kept.
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(cfg, secret, rotated, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	hup <- syscall.SIGHUP
	redistest.Poll(t, 5*time.Second, "the reload logged", func() bool {
		return strings.Contains(logs.String(), `"change":"tenants.acme.webhook_secrets: changed"`)
	})
	if strings.Contains(logs.String(), rotated[6:]) || strings.Contains(logs.String(), secret[6:]) {
		t.Fatal("the logs hold a webhook secret")
	}
	rs, err = st.Enqueue(ctx, "acme", []store.Item{{Type: wire.TypeWebhook, Body: spec.Canonical()}})
	if err != nil || rs[0].Outcome != store.Accepted {
		t.Fatalf("enqueue: %+v, %v", rs, err)
	}
	select {
	case del = <-got:
	case <-time.After(10 * time.Second):
		t.Fatalf("no second delivery within 10s\n%s", logs.String())
	}
	ts, _ = strconv.ParseInt(del.header.Get("webhook-timestamp"), 10, 64)
	keys, _ = policy.Secrets{rotated}.Keys()
	if want := webhook.Sign(keys, rs[0].ID, time.Unix(ts, 0), del.body); del.header.Get("webhook-signature") != want {
		t.Fatalf("after SIGHUP: signature %q, want %q (the rotated secret)", del.header.Get("webhook-signature"), want)
	}
	if err := os.WriteFile(cfgPath, []byte(cfg+"tenants: {x: {}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup <- syscall.SIGHUP
	redistest.Poll(t, 5*time.Second, "the bad file refused", func() bool {
		return strings.Contains(logs.String(), "configuration reload refused")
	})

	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{`sluice_worker_claims_total{outcome="ok"} 2`, "sluice_worker_send_lateness_seconds_count 2",
		"sluice_worker_send_delay_seconds_count 2", "go_goroutines"} { // two jobs, before and after the reload
		if !bytes.Contains(body, []byte(name)) {
			t.Errorf("metrics lack %q", name)
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("worker did not stop within 20s")
	}
	if n, err := st.Capacity(context.Background()); err != nil || n != 0 {
		t.Fatalf("capacity after stop: %d, %v; want the heartbeat withdrawn", n, err)
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	_, addr, err := parseFlags(nil, env(nil))
	if err != nil || addr != metricsListenDefault {
		t.Fatalf("defaults: %q, %v", addr, err)
	}
	_, addr, err = parseFlags(nil, env(map[string]string{envMetricsListen: "off"}))
	if err != nil || addr != "" {
		t.Fatalf("env off: %q, %v", addr, err)
	}
	_, addr, err = parseFlags([]string{"--metrics-listen", "127.0.0.1:0"}, env(map[string]string{envMetricsListen: "off"}))
	if err != nil || addr != "127.0.0.1:0" {
		t.Fatalf("flag over env: %q, %v", addr, err)
	}
	if _, _, err := parseFlags([]string{"--nope"}, env(nil)); err == nil {
		t.Fatal("unknown flag accepted")
	}
	if _, _, err := parseFlags([]string{"-h"}, env(nil)); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	if _, _, err := parseFlags([]string{"extra"}, env(nil)); err == nil {
		t.Fatal("positional argument accepted")
	}
}

// TestWorkerRefusesAMetaMismatch: a worker configured with other shards
// than <prefix>:meta records does not start.
func TestWorkerRefusesAMetaMismatch(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	if _, err := store.EnsureMeta(context.Background(), rdb, wire.Meta{
		Prefix: prefix, Shards: 4, Lead: store.LeadDefault, MinLead: store.MinLeadDefault,
	}); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfgPath, []byte("redis: {prefix: "+prefix+", shards: 8}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SLUICE_REDIS_URL": redistest.URL()}
	err := run(context.Background(), []string{"--config", cfgPath, "--metrics-listen", "off"},
		func(k string) string { return env[k] }, io.Discard, nil, nil)
	if !errors.Is(err, store.ErrMetaMismatch) {
		t.Fatalf("run = %v, want ErrMetaMismatch", err)
	}
}

package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestThrottlerServesChecksAndStopsGracefully(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "sluice.yaml")
	cfg := `
listen: 127.0.0.1:0
redis: {prefix: ` + redistest.Prefix(t) + `}
auth:
  keys:
    - {name: dev, key: dev-key, tenants: ["*"], limits: [search]}
limits:
  search: {algorithm: gcra, rate: 1/m, burst: 2}
log: {format: json}
`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SLUICE_REDIS_URL": redistest.URL()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrCh := make(chan string, 1)
	done := make(chan error, 1)
	var logs redistest.SyncBuffer
	go func() {
		done <- run(ctx, []string{"--config", cfgPath}, func(k string) string { return env[k] }, &logs, func(a string) { addrCh <- a }, nil)
	}()
	var addr string
	select {
	case addr = <-addrCh:
	case err := <-done:
		t.Fatalf("run ended before listening: %v\n%s", err, logs.String())
	case <-time.After(20 * time.Second):
		t.Fatal("throttler did not start listening within 20s")
	}

	statuses := make([]int, 3)
	for i := range statuses {
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/limits/search/check", strings.NewReader(`{"key":"k","cost":1}`))
		req.Header.Set("Authorization", "Bearer dev-key")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		statuses[i] = resp.StatusCode
	}
	if statuses[0] != 200 || statuses[1] != 200 || statuses[2] != 429 {
		t.Errorf("burst 2 then refusal: statuses %v, want [200 200 429]", statuses)
	}
	if strings.Contains(logs.String(), "dev-key") {
		t.Error("the plaintext API key appears in the logs")
	}
	if !strings.Contains(logs.String(), "plaintext") {
		t.Error("no warning about a plaintext API key")
	}
	if !strings.Contains(logs.String(), "hash-max-listpack-value is below 2048") { // the test Redis keeps its default, 64
		t.Error("no warning about Redis's hash-max-listpack-value")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after cancel: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("throttler did not stop within 15s of the signal")
	}
	if !strings.Contains(logs.String(), `"msg":"stopped"`) {
		t.Errorf("no stopped log line:\n%s", logs.String())
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Error("still accepting connections after shutdown")
	}
}

func TestThrottlerRefusesBadConfigListingEveryProblem(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bad.yaml")
	bad := "limits:\n  search: {algorithm: gcra, rate: 0/s, burst: 0}\nredis: {shards: 0, colour: red}\n"
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"--config", path}, func(string) string { return "" }, &redistest.SyncBuffer{}, nil, nil)
	if err == nil {
		t.Fatal("run accepted a bad config")
	}
	for _, want := range []string{"colour", "rate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q: %v", want, err)
		}
	}
}

// TestThrottlerWritesSettingsToMeta: the throttler writes its configuration's
// settings to <prefix>:meta on start, and a later start with another
// configuration overwrites them (workers follow); the fixed fields stay.
func TestThrottlerWritesSettingsToMeta(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	start := func(extra string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "sluice.yaml")
		cfg := "listen: 127.0.0.1:0\nredis: {prefix: " + prefix + ", shards: 2}\n" + extra
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		env := map[string]string{"SLUICE_REDIS_URL": redistest.URL()}
		ctx, cancel := context.WithCancel(context.Background())
		ready, done := make(chan struct{}), make(chan error, 1)
		go func() {
			done <- run(ctx, []string{"--config", path}, func(k string) string { return env[k] }, &redistest.SyncBuffer{},
				func(string) { close(ready) }, nil)
		}()
		select {
		case <-ready:
		case err := <-done:
			t.Fatalf("run ended before listening: %v", err)
		case <-time.After(20 * time.Second):
			t.Fatal("throttler did not start listening within 20s")
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
	}
	start("retention: {attempt_log: 7}\nthrottle: {max_pause: 2h}\n")
	m, found, err := store.ReadMeta(context.Background(), rdb, prefix)
	want := store.DefaultSettings()
	want.AttemptLog, want.MaxPause = 7, 2*time.Hour
	if err != nil || !found || m.Shards != 2 || m.Settings != want {
		t.Fatalf("meta after the first start: %+v, found %v, %v; want settings %+v", m, found, err, want)
	}
	start("retention: {attempt_log: 9}\ndispatch: {tolerance: 3ms}\n")
	m, _, err = store.ReadMeta(context.Background(), rdb, prefix)
	want = store.DefaultSettings()
	want.AttemptLog, want.Tolerance = 9, 3*time.Millisecond
	if err != nil || m.Settings != want {
		t.Fatalf("meta after the second start: %+v, %v; want settings %+v", m.Settings, err, want)
	}
}

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/console"
	"github.com/sluicehq/sluice/internal/redistest"
)

// serveThrottler runs the throttler with the configuration extra (beside a
// listen address, a prefix of its own and one admin key "ops-key") until
// the test ends and returns its address.
func serveThrottler(t *testing.T, extra string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	cfg := "listen: 127.0.0.1:0\nredis: {prefix: " + redistest.Prefix(t) + ", shards: 2}\n" +
		`auth: {keys: [{name: ops, key: ops-key, tenants: ["*"], admin: true}]}` + "\n" + extra
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SLUICE_REDIS_URL": redistest.URL()}
	ctx, cancel := context.WithCancel(context.Background())
	addrs, done := make(chan string, 1), make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--config", path}, func(k string) string { return env[k] }, &redistest.SyncBuffer{},
			func(a string) { addrs <- a }, nil)
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case a := <-addrs:
		return a
	case err := <-done:
		t.Fatalf("run ended before listening: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("throttler did not start listening within 20s")
	}
	return ""
}

// The throttler serves the console at /ui/ with its security headers by
// default, its summary names the throttler holding the shards, and
// ui.enabled: false takes the console away.
func TestThrottlerServesTheConsole(t *testing.T) {
	t.Parallel()
	on := serveThrottler(t, "")
	resp, err := http.Get("http://" + on + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Security-Policy") != console.Headers["Content-Security-Policy"] ||
		resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("GET /ui/: %d %v", resp.StatusCode, resp.Header)
	}
	redistest.Poll(t, 20*time.Second, "the summary names the dispatcher holding both shards", func() bool {
		req, _ := http.NewRequest(http.MethodGet, "http://"+on+"/v1/summary", nil)
		req.Header.Set("Authorization", "Bearer ops-key")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var s struct {
			Throttlers []struct {
				ID     string `json:"id"`
				Shards []int  `json:"shards"`
			} `json:"throttlers"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&s)
		return len(s.Throttlers) == 1 && len(s.Throttlers[0].ID) == 8 && len(s.Throttlers[0].Shards) == 2
	})

	off := serveThrottler(t, "ui: {enabled: false}\n")
	resp, err = http.Get("http://" + off + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /ui/ with ui.enabled false: %d, want 404", resp.StatusCode)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/throttlertest"
)

// bins are the throttler, the worker and this command, built once.
var bins throttlertest.Binaries

func TestMain(m *testing.M) {
	var err error
	if bins, err = throttlertest.Build("cmd/sluice"); err != nil {
		fmt.Fprintln(os.Stderr, "sluice tests:", err)
		os.Exit(1)
	}
	redistest.Main(m)
}

// cli runs the built sluice with args against url with key, and returns
// its stdout, stderr and exit code.
func cli(t *testing.T, url, key string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bins["sluice"], args...)
	cmd.Env = []string{"SLUICE_URL=" + url, "SLUICE_API_KEY=" + key}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run sluice %v: %v", args, err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// want runs sluice and fails t unless it exits with code; it returns
// stdout.
func want(t *testing.T, url, key string, code int, args ...string) string {
	t.Helper()
	out, errOut, got := cli(t, url, key, args...)
	if got != code {
		t.Fatalf("sluice %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), got, code, out, errOut)
	}
	return out
}

// jsonOf decodes out as one JSON object.
func jsonOf(t *testing.T, out string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	return m
}

// Every command answers --help with its usage and an example of itself;
// bad command lines exit 2 without a request.
func TestHelpAndUsage(t *testing.T) {
	t.Parallel()
	const nowhere = "http://127.0.0.1:1"
	for _, c := range commands {
		out := want(t, nowhere, "k", exitOK, append(strings.Fields(strings.TrimPrefix(c.path(), "sluice ")), "--help")...)
		if !strings.Contains(out, "usage: "+c.path()) || !strings.Contains(out, "example:\n  "+c.example) || !strings.HasPrefix(c.example, c.path()) {
			t.Errorf("%s --help:\n%s\nwant its usage and an example that runs it", c.path(), out)
		}
	}
	out := want(t, nowhere, "k", exitOK, "help")
	for _, c := range commands {
		if !strings.Contains(out, strings.TrimPrefix(c.path(), "sluice ")) {
			t.Errorf("sluice help does not list %s", c.path())
		}
	}
	want(t, nowhere, "k", exitOK, "tenants", "--help")
	want(t, nowhere, "k", exitUsage)
	want(t, nowhere, "k", exitUsage, "tenant", "ls")
	want(t, nowhere, "k", exitUsage, "tenants", "list")
	want(t, nowhere, "k", exitUsage, "tenants", "show")
	want(t, nowhere, "k", exitUsage, "tenants", "ls", "--limit", "many")
	want(t, nowhere, "k", exitUsage, "jobs", "enqueue", "acme", "--webhook", "https://x.example", "--task", "t")
	want(t, nowhere, "", exitUsage, "summary") // no key
	_, errOut, _ := cli(t, nowhere, "k", "--timeout", "200ms", "summary")
	if !strings.Contains(errOut, "no answer") {
		t.Errorf("no throttler: stderr %q, want it to say there was no answer", errOut)
	}
}

// The commands against a real throttler: output, --json and exit codes.
func TestCommands(t *testing.T) {
	t.Parallel()
	cfg := throttlertest.Config{}.Write(t)
	url := bins.StartThrottler(t, cfg, "").URL
	const admin = throttlertest.AdminKey
	run := func(code int, args ...string) string { t.Helper(); return want(t, url, admin, code, args...) }

	out := run(exitOK, "jobs", "enqueue", "acme-1", "--webhook", "https://hooks.example/in", "--event", "invoice.paid",
		"--payload", `{"id":42}`, "--delay", "1h", "--json")
	ref := jsonOf(t, out)
	id, _ := ref["id"].(string)
	if id == "" || ref["tenant"] != "acme-1" || ref["state"] != "scheduled" || len(ref) != 4 {
		t.Fatalf("enqueue --json: %v, want the API's {id, tenant, state, eta}", ref)
	}
	if out := run(exitOK, "jobs", "get", id); !strings.Contains(out, "state:") || !strings.Contains(out, "scheduled") || !strings.Contains(out, "invoice.paid") {
		t.Errorf("jobs get: %s", out)
	}
	if v := jsonOf(t, run(exitOK, "jobs", "get", id, "--json")); v["id"] != id || v["type"] != "webhook" {
		t.Errorf("jobs get --json: %v", v)
	}
	if out := run(exitOK, "jobs", "ls", "acme-1", "--state", "delayed"); !strings.HasPrefix(out, "ID") || !strings.Contains(out, id) {
		t.Errorf("jobs ls --state delayed:\n%s", out)
	}
	if page := jsonOf(t, run(exitOK, "jobs", "ls", "acme-1", "--json")); page["jobs"] == nil {
		t.Errorf("jobs ls --json: %v, want the API's page", page)
	}
	run(exitError, "jobs", "ls", "acme-1", "--state", "done")
	if out := run(exitOK, "jobs", "cancel-many", "acme-1", "--state", "delayed", "--event", "other.event", "--all"); !strings.Contains(out, "canceled 0 (done)") {
		t.Errorf("jobs cancel-many of another event: %s", out)
	}
	if out := run(exitOK, "jobs", "cancel", id); !strings.Contains(out, "canceled") {
		t.Errorf("jobs cancel: %s", out)
	}
	_, errOut, code := cli(t, url, admin, "jobs", "cancel", id)
	if code != exitError || !strings.Contains(errOut, "409 conflict") {
		t.Errorf("cancel again: exit %d, stderr %q; want 1 and the 409", code, errOut)
	}
	out, errOut, code = cli(t, url, admin, "jobs", "enqueue", "acme-1", "--webhook", "ftp://x", "--json")
	if code != exitError || !strings.Contains(errOut, "url:") || !strings.Contains(errOut, "event:") || jsonOf(t, out)["error"] == nil {
		t.Errorf("invalid job: exit %d, stdout %q, stderr %q; want 1, the API's error JSON and each problem", code, out, errOut)
	}
	if _, errOut, code := cli(t, url, "wrong-key", "summary"); code != exitError || !strings.Contains(errOut, "401") {
		t.Errorf("wrong key: exit %d, stderr %q", code, errOut)
	}

	out = run(exitOK, "tenants", "ls")
	if !strings.HasPrefix(out, "TENANT") || !strings.Contains(out, "acme-1") {
		t.Errorf("tenants ls:\n%s", out)
	}
	if page := jsonOf(t, run(exitOK, "tenants", "ls", "--json", "--prefix", "acme")); page["tenants"] == nil {
		t.Errorf("tenants ls --json: %v, want the API's page", page)
	}
	if out := run(exitOK, "tenants", "pause", "acme-1", "--for", "10m"); !strings.Contains(out, "paused") {
		t.Errorf("tenants pause:\n%s", out)
	}
	if out := run(exitOK, "tenants", "ls", "--state", "paused"); !strings.Contains(out, "acme-1") {
		t.Errorf("tenants ls --state paused:\n%s", out)
	}
	run(exitOK, "tenants", "resume", "acme-1")
	v := jsonOf(t, run(exitOK, "tenants", "show", "acme-1", "--json"))
	version := fmt.Sprint(v["version"])
	if p := jsonOf(t, run(exitOK, "tenants", "policy", "acme-1", "--set", `{"burst":7}`, "--if-match", version, "--json")); fmt.Sprint(p["version"]) == version {
		t.Errorf("policy put: %v, want a new version", p)
	}
	run(exitError, "tenants", "policy", "acme-1", "--set", `{"burst":8}`, "--if-match", version) // stale
	if out := run(exitOK, "tenants", "policy", "acme-1"); !strings.Contains(out, `"burst":7`) {
		t.Errorf("tenants policy:\n%s", out)
	}
	run(exitOK, "tenants", "live", "acme-1")

	run(exitOK, "upstreams", "put", "crm", "--rate", "10/s", "--burst", "5")
	if out := run(exitOK, "upstreams", "ls"); !strings.Contains(out, "crm") || !strings.Contains(out, "10/s") {
		t.Errorf("upstreams ls:\n%s", out)
	}
	if out := run(exitOK, "upstreams", "pause", "crm", "--for", "1m"); !strings.Contains(out, "until") {
		t.Errorf("upstreams pause:\n%s", out)
	}
	run(exitOK, "upstreams", "resume", "crm")
	if u := jsonOf(t, run(exitOK, "upstreams", "show", "crm", "--json")); u["name"] != "crm" || u["paused"] != false {
		t.Errorf("upstreams show --json: %v", u)
	}
	run(exitError, "upstreams", "put", "crm", "--rate", "20/s", "--if-match", "0") // exists: 412
	run(exitOK, "upstreams", "rm", "crm")
	run(exitError, "upstreams", "show", "crm")

	sec := jsonOf(t, run(exitOK, "secrets", "create", "acme-1", "--json"))
	secID, _ := sec["id"].(string)
	if secID == "" || !strings.HasPrefix(fmt.Sprint(sec["secret"]), "whsec_") {
		t.Fatalf("secrets create --json: %v", sec)
	}
	if out := run(exitOK, "secrets", "ls", "acme-1"); !strings.Contains(out, secID) || strings.Contains(out, "whsec_") {
		t.Errorf("secrets ls:\n%s", out)
	}
	run(exitOK, "secrets", "rm", "acme-1", secID)
	run(exitError, "secrets", "rm", "acme-1", secID)

	key := jsonOf(t, run(exitOK, "keys", "create", "ci", "--tenants", "acme-*", "--expires-in", "1h", "--json"))
	if !strings.HasPrefix(fmt.Sprint(key["key"]), "sk_") || key["expires_at"] == nil {
		t.Fatalf("keys create --json: %v", key)
	}
	if out := run(exitOK, "keys", "ls"); !strings.Contains(out, "ci") || !strings.Contains(out, "config") || strings.Contains(out, "sk_") {
		t.Errorf("keys ls:\n%s", out)
	}
	run(exitOK, "keys", "rm", "ci")
	run(exitError, "keys", "rm", "ci")
	if out := run(exitOK, "reload"); !strings.Contains(out, "no change") {
		t.Errorf("reload:\n%s", out)
	}

	for range 3 {
		run(exitOK, "limits", "check", "search", "user-1")
	}
	if d := jsonOf(t, run(exitRefused, "limits", "check", "search", "user-1", "--json")); d["allowed"] != false {
		t.Errorf("4th check: %v", d)
	}
	if out := run(exitOK, "summary"); !strings.Contains(out, "tenants:") || !strings.Contains(out, "admin") {
		t.Errorf("summary:\n%s", out)
	}
}

// Refusals a script should back off from exit 3.
func TestRefusedExit(t *testing.T) {
	t.Parallel()
	url := bins.StartThrottler(t, throttlertest.Config{}.Write(t), "").URL
	const admin = throttlertest.AdminKey
	run := func(code int, args ...string) string { t.Helper(); return want(t, url, admin, code, args...) }
	enqueue := func(tenant string) []string {
		return []string{"jobs", "enqueue", tenant, "--webhook", "https://hooks.example/in", "--event", "e", "--delay", "1h"}
	}
	run(exitOK, "tenants", "policy", "slow", "--set", `{"admit":{"rate":"1/h","burst":1}}`)
	run(exitOK, enqueue("slow")...)
	if _, errOut, code := cli(t, url, admin, enqueue("slow")...); code != exitRefused || !strings.Contains(errOut, "429 rate_limited") {
		t.Errorf("over admission: exit %d, stderr %q; want 3", code, errOut)
	}
	run(exitOK, "tenants", "policy", "full", "--set", `{"max_backlog":1}`)
	run(exitOK, enqueue("full")...)
	if _, errOut, code := cli(t, url, admin, enqueue("full")...); code != exitRefused || !strings.Contains(errOut, "backlog_full") {
		t.Errorf("over max_backlog: exit %d, stderr %q; want 3", code, errOut)
	}
}

// Dead letters by a real worker, listed and replayed from the CLI.
func TestDeadLetters(t *testing.T) {
	t.Parallel()
	cfg := throttlertest.Config{}.Write(t)
	url := bins.StartThrottler(t, cfg, "").URL
	bins.StartWorker(t, cfg, "")
	const admin = throttlertest.AdminKey
	run := func(code int, args ...string) string { t.Helper(); return want(t, url, admin, code, args...) }
	var failing atomic.Bool
	failing.Store(true)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(recv.Close)
	var ids []string
	for range 2 {
		ids = append(ids, jsonOf(t, run(exitOK, "jobs", "enqueue", "dead", "--webhook", recv.URL, "--event", "e", "--max-attempts", "1", "--json"))["id"].(string))
	}
	redistest.PollMsg(t, 30*time.Second, func() (bool, string) {
		out := run(exitOK, "dead", "ls", "dead")
		return strings.Contains(out, ids[0]) && strings.Contains(out, ids[1]), "dead ls:\n" + out
	})
	failing.Store(false)
	if out := run(exitOK, "jobs", "replay", ids[0]); strings.Contains(out, "state:  dead") {
		t.Errorf("jobs replay:\n%s", out)
	}
	if out := run(exitOK, "dead", "replay", "dead", "--all"); !strings.Contains(out, "replayed 1 (done)") {
		t.Errorf("dead replay --all: %s", out)
	}
	redistest.PollMsg(t, 30*time.Second, func() (bool, string) {
		for _, id := range ids {
			if v := jsonOf(t, run(exitOK, "jobs", "get", id, "--json")); v["state"] != "succeeded" {
				return false, fmt.Sprintf("job %s is %v", id, v["state"])
			}
		}
		return true, ""
	})
}

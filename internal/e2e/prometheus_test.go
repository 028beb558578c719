package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// promServer is a real Prometheus (Debian's prometheus package, which
// scripts/test installs when missing) started for one test.
type promServer struct {
	t    *testing.T
	addr string
	http *http.Client
}

// promSeries is one series of a query's answer: its labels.
type promSeries struct {
	Metric map[string]string `json:"metric"`
}

// forRE matches a rule's `for:` line, whatever its duration.
var forRE = regexp.MustCompile(`(?m)^(\s*)for:\s*\S+\s*$`)

// startPrometheus writes a configuration that scrapes targets (job name →
// host:port, /metrics) and evaluates rules every second, with the rules of
// rulesFile copied with every `for:` cut to 0s (the shipped expressions;
// only the waiting is cut, so a provoked condition fires at the next
// evaluation), starts prometheus on a free loopback port and waits until
// it is ready. A machine without prometheus fails the test: scripts/test
// installs it.
func startPrometheus(t *testing.T, rulesFile string, targets map[string]string) *promServer {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus is not installed (scripts/test installs Debian's package): %v", err)
	}
	dir := t.TempDir()
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "alerts.yml"), forRE.ReplaceAll(rules, []byte("${1}for: 0s")))
	cfg := "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n" +
		"rule_files: [alerts.yml]\nscrape_configs:\n"
	for job, target := range targets {
		cfg += fmt.Sprintf("  - {job_name: %s, static_configs: [{targets: [%q]}]}\n", job, target)
	}
	writeFile(t, filepath.Join(dir, "prometheus.yml"), []byte(cfg))
	p := &promServer{t: t, addr: freeAddr(t), http: &http.Client{Timeout: 10 * time.Second}}
	proc := startProc(t, "prometheus", bin, []string{"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "data"), "--web.listen-address=" + p.addr}, nil)
	poll(t, startTimeout, func() (bool, string) {
		if !proc.running() {
			t.Fatalf("prometheus ended (%s): %s", proc.status, tail(proc.logs.String(), 20))
		}
		resp, err := p.http.Get("http://" + p.addr + "/-/ready")
		if err != nil {
			return false, fmt.Sprintf("prometheus at %s not ready: %v", p.addr, err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("prometheus /-/ready answers %d", resp.StatusCode)
	})
	return p
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// query runs an instant query and returns its series.
func (p *promServer) query(q string) []promSeries {
	p.t.Helper()
	return p.get("/api/v1/query", url.Values{"query": {q}})
}

// queryRange runs q over [from, now] in steps of a second and returns the
// series that had a value at any step.
func (p *promServer) queryRange(q string, from time.Time) []promSeries {
	p.t.Helper()
	now := time.Now()
	return p.get("/api/v1/query_range", url.Values{"query": {q}, "step": {"1"},
		"start": {strconv.FormatInt(from.Unix(), 10)}, "end": {strconv.FormatInt(now.Unix()+1, 10)}})
}

func (p *promServer) get(path string, v url.Values) []promSeries {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+path+"?"+v.Encode(), nil)
	if err != nil {
		p.t.Fatal(err)
	}
	resp, err := p.http.Do(req)
	if err != nil {
		p.t.Fatalf("prometheus %s %s: %v", path, v.Get("query"), err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []promSeries `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Status != "success" {
		p.t.Fatalf("prometheus %s %s: %d %s (%v)", path, v.Get("query"), resp.StatusCode, raw, err)
	}
	return out.Data.Result
}

// firing returns the firing alerts, by name, with their labels.
func (p *promServer) firing() map[string][]map[string]string {
	p.t.Helper()
	out := map[string][]map[string]string{}
	for _, s := range p.query(`ALERTS{alertstate="firing"}`) {
		out[s.Metric["alertname"]] = append(out[s.Metric["alertname"]], s.Metric)
	}
	return out
}

// waitFiring waits until alert fires (with labels including want, when
// given) and returns its labels.
func (p *promServer) waitFiring(alert string, want map[string]string) map[string]string {
	p.t.Helper()
	var got map[string]string
	poll(p.t, 30*time.Second, func() (bool, string) {
		all := p.firing()
		for _, labels := range all[alert] {
			if hasLabels(labels, want) {
				got = labels
				return true, ""
			}
		}
		return false, fmt.Sprintf("alert %s%v does not fire; firing: %v", alert, want, all)
	})
	return got
}

func hasLabels(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

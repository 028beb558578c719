package deploytest

import (
	"cmp"
	"encoding/json"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/config"
)

type metricKind int

const (
	counter metricKind = iota
	gauge
	histogram
)

// knownMetric is a metric Sluice exports: its kind, its labels (with their
// values where the source bounds them to a fixed set) and the directory
// that defines it.
type knownMetric struct {
	kind   metricKind
	labels []string
	dir    string
	values map[string][]string
}

// knownMetrics are the metrics the dashboards may query, from the sources:
// internal/api/metrics.go, internal/dispatch/metrics.go and state_metrics.go, and
// internal/worker/metrics.go. TestKnownMetricsDefined keeps the list honest.
var knownMetrics = map[string]knownMetric{
	"sluice_limit_decisions_total":         {kind: counter, labels: []string{"limit", "outcome"}, dir: "internal/api", values: map[string][]string{"outcome": {"allowed", "limited"}}},
	"sluice_redis_errors_total":            {kind: counter, labels: []string{"op"}, dir: "internal/api"},
	"sluice_api_limiter_fail_open_total":   {kind: counter, dir: "internal/api"},
	"sluice_api_storage_full_total":        {kind: counter, dir: "internal/api"},
	"sluice_http_request_duration_seconds": {kind: histogram, labels: []string{"route", "code"}, dir: "internal/api"},

	"sluice_dispatch_released_total":       {kind: counter, labels: []string{"type"}, dir: "internal/dispatch", values: map[string][]string{"type": {"webhook", "http", "task", "other"}}},
	"sluice_dispatch_passes_total":         {kind: counter, dir: "internal/dispatch"},
	"sluice_dispatch_pass_seconds":         {kind: histogram, dir: "internal/dispatch"},
	"sluice_dispatch_enqueue_errors_total": {kind: counter, dir: "internal/dispatch"},
	"sluice_dispatch_pass_errors_total":    {kind: counter, dir: "internal/dispatch"},
	"sluice_dispatch_promoted_total":       {kind: counter, dir: "internal/dispatch"},
	"sluice_dispatch_swept_total":          {kind: counter, dir: "internal/dispatch"},
	"sluice_dispatch_shards_owned":         {kind: gauge, dir: "internal/dispatch"},
	"sluice_dispatch_shards":               {kind: gauge, dir: "internal/dispatch"},
	"sluice_redis_up":                      {kind: gauge, dir: "internal/dispatch"},
	"sluice_redis_memory_used_bytes":       {kind: gauge, labels: []string{"node"}, dir: "internal/dispatch"},
	"sluice_redis_maxmemory_bytes":         {kind: gauge, labels: []string{"node"}, dir: "internal/dispatch"},

	"sluice_worker_claims_total": {kind: counter, labels: []string{"outcome"}, dir: "internal/worker",
		values: map[string][]string{"outcome": {"ok", "early", "stale", "canceled", "returned", "error", "lapsed", "other"}}},
	"sluice_worker_attempts_total": {kind: counter, labels: []string{"kind"}, dir: "internal/worker",
		values: map[string][]string{"kind": {"success", "retry", "throttled", "permanent", "gone", "other"}}},
	"sluice_worker_send_lateness_seconds": {kind: histogram, dir: "internal/worker"},
	"sluice_worker_waiting":               {kind: gauge, dir: "internal/worker"},
	"sluice_worker_finish_errors_total":   {kind: counter, dir: "internal/worker"},
	"sluice_worker_redis_rtt_seconds":     {kind: gauge, dir: "internal/worker"},
	"sluice_worker_finish_seconds":        {kind: histogram, dir: "internal/worker"},
	"sluice_worker_delivery_seconds":      {kind: histogram, labels: []string{"kind"}, dir: "internal/worker"},
	"sluice_worker_dead_letters_total":    {kind: counter, dir: "internal/worker"},

	"sluice_tenant_backlog_jobs":              {kind: gauge, labels: []string{"tenant"}, dir: "internal/dispatch"},
	"sluice_tenant_paused":                    {kind: gauge, labels: []string{"tenant", "reason"}, dir: "internal/dispatch", values: map[string][]string{"reason": {"admin", "upstream", "disabled"}}},
	"sluice_tenant_rate_per_second":           {kind: gauge, labels: []string{"tenant"}, dir: "internal/dispatch"},
	"sluice_inflight_jobs":                    {kind: gauge, dir: "internal/dispatch"},
	"sluice_tenant_effective_rate_per_second": {kind: gauge, labels: []string{"tenant"}, dir: "internal/dispatch"},
	"sluice_tenant_oldest_job_age_seconds":    {kind: gauge, labels: []string{"tenant"}, dir: "internal/dispatch"},
	"sluice_tenant_drain_seconds":             {kind: gauge, labels: []string{"tenant"}, dir: "internal/dispatch"},
	"sluice_worker_capacity":                  {kind: gauge, dir: "internal/dispatch"},
	"sluice_asynq_queue_tasks":                {kind: gauge, labels: []string{"queue", "state"}, dir: "internal/dispatch"},
}

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"job", "instance"}

// TestKnownMetricsDefined requires each known metric's name to appear in
// the non-test Go sources under internal/ or cmd/. A metric whose package
// does not exist yet is only logged.
func TestKnownMetricsDefined(t *testing.T) {
	t.Parallel()
	var src strings.Builder
	for _, root := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, root), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			src.Write(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range keys(knownMetrics) {
		if strings.Contains(src.String(), `"`+name+`"`) {
			continue
		}
		m := knownMetrics[name]
		if _, err := os.Stat(filepath.Join(repoRoot, m.dir)); errors.Is(err, os.ErrNotExist) {
			t.Logf("%s: %s does not exist yet; metric not checked", name, m.dir)
			continue
		}
		t.Errorf("metric %s is defined nowhere in the sources (expected in %s)", name, m.dir)
	}
}

// resolveMetric maps a series name in a query to its known metric,
// accepting a histogram's _bucket, _sum and _count series.
func resolveMetric(series string) (knownMetric, bool) {
	if m, ok := knownMetrics[series]; ok {
		return m, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(series, suffix); ok {
			if m, ok := knownMetrics[base]; ok && m.kind == histogram {
				return m, true
			}
		}
	}
	return knownMetric{}, false
}

var (
	seriesRE   = regexp.MustCompile(`\bsluice_[A-Za-z0-9_:]*`)
	selectorRE = regexp.MustCompile(`\b(sluice_[A-Za-z0-9_:]*)\{([^}]*)\}`)
	matcherRE  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	groupingRE = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	legendRE   = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)
)

// checkQuery checks one PromQL expression and its legend: every sluice_
// series is a known metric, label matchers name the metric's labels, and
// grouping and legend labels exist on some series of the query.
func checkQuery(t *testing.T, where, expr, legend string) {
	t.Helper()
	series := seriesRE.FindAllString(expr, -1)
	if len(series) == 0 {
		t.Errorf("%s: %q queries no sluice_ metric", where, expr)
		return
	}
	labels := slices.Clone(targetLabels)
	for _, s := range series {
		m, ok := resolveMetric(s)
		if !ok {
			t.Errorf("%s: %s is not a known Sluice metric", where, s)
			continue
		}
		labels = append(labels, m.labels...)
		if strings.HasSuffix(s, "_bucket") {
			labels = append(labels, "le")
		}
	}
	for _, sel := range selectorRE.FindAllStringSubmatch(expr, -1) {
		m, _ := resolveMetric(sel[1])
		for _, lm := range matcherRE.FindAllStringSubmatch(sel[2], -1) {
			name, op, value := lm[1], lm[2], lm[3]
			switch {
			case !slices.Contains(m.labels, name) && !slices.Contains(targetLabels, name):
				t.Errorf("%s: %s has no label %q", where, sel[1], name)
			case (op == "=" || op == "!=") && m.values[name] != nil && !slices.Contains(m.values[name], value):
				t.Errorf("%s: %s{%s} is never %q (values %v)", where, sel[1], name, value, m.values[name])
			}
		}
	}
	var used []string
	for _, g := range groupingRE.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			used = append(used, strings.TrimSpace(l))
		}
	}
	for _, l := range legendRE.FindAllStringSubmatch(legend, -1) {
		used = append(used, l[1])
	}
	for _, l := range used {
		if l != "" && !slices.Contains(labels, l) {
			t.Errorf("%s: label %q is on none of the series of %q", where, l, expr)
		}
	}
}

type prometheusConfig struct {
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// TestPrometheusTargets checks deploy/prometheus.yml against the compose
// file: Prometheus reads it, and it scrapes /metrics on the throttler's
// listen port and the worker's --metrics-listen port.
func TestPrometheusTargets(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	prom := c.service(t, "prometheus")
	configFile, ok := flagValue(prom.Command, "--config.file")
	if !ok {
		configFile = "/etc/prometheus/prometheus.yml" // the image's default
	}
	host := prom.hostPath(configFile)
	if filepath.Clean(host) != filepath.Join(repoRoot, "deploy", "prometheus.yml") {
		t.Fatalf("prometheus reads %s, mounted from %q; want deploy/prometheus.yml", configFile, host)
	}
	var pc prometheusConfig
	decodeYAML(t, host, &pc)
	targets := map[string]string{} // host:port → metrics path
	for _, sc := range pc.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				targets[target] = cmp.Or(sc.MetricsPath, "/metrics")
			}
		}
	}
	listen := c.service(t, "throttler").Environment[config.EnvListen]
	_, listenPort, err := net.SplitHostPort(listen)
	if err != nil {
		t.Fatalf("throttler %s %q: %v", config.EnvListen, listen, err)
	}
	metricsListen, _ := flagValue(c.service(t, "worker").Command, "--metrics-listen")
	_, metricsPort, err := net.SplitHostPort(metricsListen)
	if err != nil {
		t.Fatalf("worker --metrics-listen %q: %v", metricsListen, err)
	}
	for _, want := range []string{"throttler:" + listenPort, "worker:" + metricsPort} {
		path, ok := targets[want]
		switch {
		case !ok:
			t.Errorf("prometheus does not scrape %s (targets %v)", want, keys(targets))
		case path != "/metrics":
			t.Errorf("prometheus scrapes %s at %s, want /metrics", want, path)
		}
	}
	for target := range targets {
		h, _, err := net.SplitHostPort(target)
		if err != nil {
			t.Errorf("target %q: %v", target, err)
			continue
		}
		if _, ok := c.Services[h]; !ok {
			t.Errorf("target %q names no compose service", target)
		}
	}
}

type grafanaDatasources struct {
	Datasources []struct {
		Name string `yaml:"name"`
		UID  string `yaml:"uid"`
		Type string `yaml:"type"`
		URL  string `yaml:"url"`
	} `yaml:"datasources"`
}

type grafanaProviders struct {
	Providers []struct {
		Name    string `yaml:"name"`
		Type    string `yaml:"type"`
		Options struct {
			Path string `yaml:"path"`
		} `yaml:"options"`
	} `yaml:"providers"`
}

// dashboard is the part of a Grafana dashboard the tests read; panels nest
// inside rows.
type dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Title      string      `json:"title"`
	Type       string      `json:"type"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		Datasource   *datasource `json:"datasource"`
		Expr         string      `json:"expr"`
		LegendFormat string      `json:"legendFormat"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// TestGrafana checks the provisioning the compose file mounts: the
// Prometheus datasource points at the compose prometheus service, the
// dashboard provider reads the mounted dashboards, and every dashboard
// parses, uses that datasource and queries only known Sluice metrics and
// their labels.
func TestGrafana(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	g := c.service(t, "grafana")
	provisioning := g.hostPath("/etc/grafana/provisioning")
	if provisioning == "" {
		t.Fatal("grafana does not mount a provisioning directory at /etc/grafana/provisioning")
	}

	var ds grafanaDatasources
	decodeYAML(t, filepath.Join(provisioning, "datasources", "prometheus.yml"), &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].UID == "" {
		t.Fatalf("datasources %+v, want one prometheus datasource with a uid", ds.Datasources)
	}
	uid := ds.Datasources[0].UID
	u, err := url.Parse(ds.Datasources[0].URL)
	if err != nil || u.Hostname() != "prometheus" || u.Port() != "9090" {
		t.Errorf("datasource url %q, want the compose service http://prometheus:9090", ds.Datasources[0].URL)
	}

	var dp grafanaProviders
	decodeYAML(t, filepath.Join(provisioning, "dashboards", "sluice.yml"), &dp)
	if len(dp.Providers) != 1 || dp.Providers[0].Type != "file" {
		t.Fatalf("dashboard providers %+v, want one file provider", dp.Providers)
	}
	dir := g.hostPath(dp.Providers[0].Options.Path)
	if dir == "" {
		t.Fatalf("dashboard provider path %q is not mounted into grafana", dp.Providers[0].Options.Path)
	}
	if home := g.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != "" {
		if _, err := os.Stat(g.hostPath(home)); g.hostPath(home) == "" || err != nil {
			t.Errorf("home dashboard %s is not a mounted file", home)
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s (%v)", dir, err)
	}
	for _, f := range files {
		checkDashboard(t, f, uid)
	}
}

func checkDashboard(t *testing.T, file, uid string) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("%s: uid %q title %q, want both", file, d.UID, d.Title)
	}
	queries := 0
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			where := filepath.Base(file) + ": panel " + p.Title
			if p.Datasource != nil && p.Datasource.UID != uid {
				t.Errorf("%s: datasource %q, want %q", where, p.Datasource.UID, uid)
			}
			for _, tg := range p.Targets {
				if tg.Datasource != nil && tg.Datasource.UID != uid {
					t.Errorf("%s: target datasource %q, want %q", where, tg.Datasource.UID, uid)
				}
				checkQuery(t, where, tg.Expr, tg.LegendFormat)
				queries++
			}
		}
	}
	walk(d.Panels)
	if queries == 0 {
		t.Errorf("%s: no queries", file)
	}
}

func decodeYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

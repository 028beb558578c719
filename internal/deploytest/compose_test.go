package deploytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/config"
)

// repoRoot is the module root, seen from this package's directory (where
// go test runs the tests).
const repoRoot = "../.."

// composeFile is the part of docker-compose.yml the tests read. It is
// decoded with unknown keys refused, so a misspelt key (nothing here runs
// Docker to catch it) fails the test: add a field when the file needs a
// new key.
type composeFile struct {
	Name     string             `yaml:"name"`
	Services map[string]service `yaml:"services"`
	Volumes  map[string]any     `yaml:"volumes"`
}

type service struct {
	Image       string            `yaml:"image"`
	Build       *buildSpec        `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	DependsOn   dependsOn         `yaml:"depends_on"`
	Healthcheck *struct {
		Test     []string `yaml:"test"`
		Interval string   `yaml:"interval"`
		Timeout  string   `yaml:"timeout"`
		Retries  int      `yaml:"retries"`
	} `yaml:"healthcheck"`
	Restart  string   `yaml:"restart"`
	Profiles []string `yaml:"profiles"`
}

type buildSpec struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

// dependsOn is depends_on in either form: a list of services or a map of
// service → {condition}; it holds service → condition ("" for the list form).
type dependsOn map[string]string

func (d *dependsOn) UnmarshalYAML(n *yaml.Node) error {
	*d = dependsOn{}
	switch n.Kind {
	case yaml.SequenceNode:
		var names []string
		if err := n.Decode(&names); err != nil {
			return err
		}
		for _, s := range names {
			(*d)[s] = ""
		}
		return nil
	case yaml.MappingNode:
		var m map[string]struct {
			Condition string `yaml:"condition"`
		}
		if err := n.Decode(&m); err != nil {
			return err
		}
		for s, c := range m {
			(*d)[s] = c.Condition
		}
		return nil
	}
	return fmt.Errorf("depends_on: want a list or a map, line %d", n.Line)
}

// mount is one entry of a service's volumes: a bind mount (host path
// relative to the repository) or a named volume.
type mount struct {
	source, target string
	bind, readOnly bool
}

func parseMount(spec string) mount {
	parts := strings.Split(spec, ":")
	m := mount{source: parts[0]}
	if len(parts) > 1 {
		m.target = parts[1]
	}
	m.readOnly = len(parts) > 2 && parts[2] == "ro"
	m.bind = strings.HasPrefix(m.source, ".") || strings.HasPrefix(m.source, "/")
	return m
}

func (s service) mounts() []mount {
	out := make([]mount, 0, len(s.Volumes))
	for _, v := range s.Volumes {
		out = append(out, parseMount(v))
	}
	return out
}

// hostPath maps a path inside the container to the repository file a bind
// mount puts there ("" when none does).
func (s service) hostPath(containerPath string) string {
	for _, m := range s.mounts() {
		if !m.bind {
			continue
		}
		if containerPath == m.target {
			return filepath.Join(repoRoot, m.source)
		}
		if rest, ok := strings.CutPrefix(containerPath, m.target+"/"); ok {
			return filepath.Join(repoRoot, m.source, rest)
		}
	}
	return ""
}

// publishes reports whether the service publishes containerPort.
func (s service) publishes(containerPort string) bool {
	for _, p := range s.Ports {
		parts := strings.Split(strings.TrimSuffix(p, "/tcp"), ":")
		if parts[len(parts)-1] == containerPort {
			return true
		}
	}
	return false
}

func loadCompose(t *testing.T) *composeFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c composeFile
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return &c
}

func (c *composeFile) service(t *testing.T, name string) service {
	t.Helper()
	s, ok := c.Services[name]
	if !ok {
		t.Fatalf("docker-compose.yml has no service %q", name)
	}
	return s
}

// TestComposeServices checks the file's structure: the services of docs/design.md
// §8, dependencies on services that exist, named volumes that are declared
// and bind mounts of files that exist.
func TestComposeServices(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	for _, name := range []string{"redis", "throttler", "worker", "prometheus", "grafana"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("service %q is missing", name)
		}
	}
	for name, s := range c.Services {
		if s.Image == "" && s.Build == nil {
			t.Errorf("service %q has neither image nor build", name)
		}
		for dep := range s.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("service %q depends on %q, which is not a service", name, dep)
			}
		}
		for _, m := range s.mounts() {
			switch {
			case m.target == "":
				t.Errorf("service %q: volume %q has no container path", name, m.source)
			case m.bind:
				if _, err := os.Stat(filepath.Join(repoRoot, m.source)); err != nil {
					t.Errorf("service %q mounts %s, which does not exist: %v", name, m.source, err)
				}
				if !m.readOnly {
					t.Errorf("service %q mounts %s read-write; repository files are mounted :ro", name, m.source)
				}
			default:
				if _, ok := c.Volumes[m.source]; !ok {
					t.Errorf("service %q uses volume %q, which is not declared under volumes:", name, m.source)
				}
			}
		}
	}
	for _, name := range []string{"throttler", "worker"} {
		if cond, ok := c.Services[name].DependsOn["redis"]; !ok || cond != "service_healthy" {
			t.Errorf("service %q: depends_on redis = %q, want service_healthy", name, cond)
		}
	}
	if c.service(t, "redis").Healthcheck == nil {
		t.Error("redis has no healthcheck, so service_healthy never holds")
	}
}

// TestComposeRedis checks Redis as docs/design.md §3 and asynq need it: AOF on,
// maxmemory-policy noeviction, data on a volume.
func TestComposeRedis(t *testing.T) {
	t.Parallel()
	s := loadCompose(t).service(t, "redis")
	if !strings.HasPrefix(s.Image, "redis:7") {
		t.Errorf("redis image %q, want redis:7", s.Image)
	}
	for flag, want := range map[string]string{"--appendonly": "yes", "--maxmemory-policy": "noeviction"} {
		if got, ok := flagValue(s.Command, flag); !ok || got != want {
			t.Errorf("redis command %q: %s = %q, want %q", s.Command, flag, got, want)
		}
	}
	if !slices.ContainsFunc(s.mounts(), func(m mount) bool { return m.target == "/data" && !m.bind }) {
		t.Errorf("redis volumes %q: want a named volume at /data (the AOF)", s.Volumes)
	}
}

// flagValue finds "--name value" or "--name=value" in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// sluiceService is one Sluice binary run by the compose file, with what it
// reads besides config.FromFlags's --config and environment.
type sluiceService struct {
	name string
	// extraFlags: flag name → whether it takes a value.
	extraFlags map[string]bool
	// extraEnv: environment variables.
	extraEnv []string
}

var sluiceServices = []sluiceService{
	{name: "throttler"},
	{name: "worker", extraFlags: map[string]bool{"metrics-listen": true}, extraEnv: []string{"SLUICE_METRICS_LISTEN"}},
}

// TestComposeSluice checks the throttler and worker services against the
// binaries: the image builds their command, the command's flags are ones
// the binary parses, the configuration they mount loads with
// config.FromFlags under the compose environment (so every environment
// variable is one config reads and the mounted file is valid), Redis is the
// compose service, and the listen addresses are reachable and published.
func TestComposeSluice(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	dockerfile := readFile(t, "Dockerfile")
	for _, svc := range sluiceServices {
		t.Run(svc.name, func(t *testing.T) {
			s := c.service(t, svc.name)
			if s.Build == nil || s.Build.Context != "." || s.Build.Dockerfile != "Dockerfile" {
				t.Errorf("build %+v, want {context: ., dockerfile: Dockerfile}", s.Build)
			}
			if len(s.Command) == 0 || s.Command[0] != svc.name {
				t.Fatalf("command %q, want it to run %s", s.Command, svc.name)
			}
			if !strings.Contains(dockerfile, "./cmd/"+svc.name) {
				t.Errorf("the Dockerfile does not build ./cmd/%s", svc.name)
			}
			if _, err := os.Stat(filepath.Join(repoRoot, "cmd", svc.name)); err != nil {
				t.Logf("cmd/%s does not exist yet: its command is checked against config.FromFlags and the flags listed here only", svc.name)
			}
			envUsed := checkEnvironment(t, s, svc.extraEnv)
			args, extra := splitFlags(t, s.Command[1:], svc.extraFlags)
			declared := envUsed
			for name := range extra {
				declared = append(declared, name)
			}
			checkDeclared(t, svc.name, declared)
			cfg := loadServiceConfig(t, s, args)
			if v := s.Environment[config.EnvRedisURL]; v != "" && cfg.Redis.URL != v {
				t.Errorf("redis.url = %q after loading, want %s %q", cfg.Redis.URL, config.EnvRedisURL, v)
			}
			checkRedisURL(t, c, cfg.Redis.URL)
			if svc.name == "throttler" {
				if v := s.Environment[config.EnvListen]; cfg.Listen != v {
					t.Errorf("listen = %q after loading, want %s %q", cfg.Listen, config.EnvListen, v)
				}
				checkListen(t, s, "listen", cfg.Listen)
			}
			if addr, ok := extra["metrics-listen"]; ok {
				checkListen(t, s, "--metrics-listen", addr)
			}
		})
	}
}

// checkEnvironment requires every variable of the service's environment
// to be one config reads or one of extra; it returns those of extra used.
func checkEnvironment(t *testing.T, s service, extra []string) []string {
	t.Helper()
	known := []string{config.EnvConfig, config.EnvRedisURL, config.EnvListen, config.EnvSecretsKey, config.EnvSecretsKeyID}
	var used []string
	for k := range s.Environment {
		switch {
		case slices.Contains(extra, k):
			used = append(used, k)
		case !slices.Contains(known, k):
			t.Errorf("environment %s is not read by Sluice (config reads %v, the binary also %v)", k, known, extra)
		}
	}
	return used
}

// splitFlags separates the binary-specific flags (extra, name → value)
// from the arguments config.FromFlags parses.
func splitFlags(t *testing.T, args []string, extra map[string]bool) ([]string, map[string]string) {
	t.Helper()
	var rest []string
	values := map[string]string{}
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		takesValue, ok := extra[name]
		if !strings.HasPrefix(args[i], "-") || !ok {
			rest = append(rest, args[i])
			continue
		}
		if takesValue && !hasValue {
			if i+1 == len(args) {
				t.Fatalf("flag %s has no value", args[i])
			}
			i++
			value = args[i]
		}
		values[name] = value
	}
	return rest, values
}

// checkDeclared requires each flag or environment variable name the
// compose file gives the binary beyond config's to appear, quoted, in the
// sources of cmd/<binary> (once it exists).
func checkDeclared(t *testing.T, binary string, names []string) {
	t.Helper()
	if len(names) == 0 {
		return
	}
	src, err := goSources(filepath.Join(repoRoot, "cmd", binary))
	if errors.Is(err, os.ErrNotExist) {
		t.Logf("cmd/%s does not exist yet: %v not checked against its sources", binary, names)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if !strings.Contains(src, `"`+name+`"`) {
			t.Errorf("cmd/%s reads no flag or variable %q, which docker-compose.yml passes", binary, name)
		}
	}
}

// loadServiceConfig runs config.FromFlags with the service's arguments
// (container paths mapped to the repository files mounted there) and its
// compose environment.
func loadServiceConfig(t *testing.T, s service, args []string) *config.Config {
	t.Helper()
	mapped := slices.Clone(args)
	for i, a := range mapped {
		if strings.HasPrefix(a, "/") {
			host := s.hostPath(a)
			if host == "" {
				t.Fatalf("argument %s is not a file mounted into the container", a)
			}
			mapped[i] = host
		}
	}
	if p := s.Environment[config.EnvConfig]; p != "" && s.hostPath(p) == "" {
		t.Errorf("%s=%s is not a file mounted into the container", config.EnvConfig, p)
	}
	getenv := func(k string) string {
		if k == config.EnvConfig {
			return s.hostPath(s.Environment[k])
		}
		return s.Environment[k]
	}
	cfg, err := config.FromFlags(mapped, getenv)
	if err != nil {
		t.Fatalf("command %q with environment %v: %v", s.Command, s.Environment, err)
	}
	return cfg
}

// checkRedisURL requires Redis to be the compose redis service.
func checkRedisURL(t *testing.T, c *composeFile, raw string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("redis URL %q: %v", raw, err)
	}
	if u.Hostname() != "redis" || u.Port() != "6379" {
		t.Errorf("redis URL %q, want the compose service redis:6379", raw)
	}
	if _, ok := c.Services[u.Hostname()]; !ok {
		t.Errorf("redis URL %q names no service", raw)
	}
}

// checkListen requires addr to listen on every interface (a container's
// loopback is unreachable from the others) on a port the service publishes.
func checkListen(t *testing.T, s service, what, addr string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", what, addr, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		t.Errorf("%s %q is loopback: unreachable from Prometheus and the host", what, addr)
	}
	if !s.publishes(port) {
		t.Errorf("%s port %s is not published (ports %q)", what, port, s.Ports)
	}
}

// TestSampleConfig checks deploy/sluice.yaml beyond loading: keys by hash
// only, whose documented example plaintexts match, the tenants and limits
// it shows, and no egress ranges opened.
func TestSampleConfig(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(filepath.Join(repoRoot, "deploy", "sluice.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	byHash := cfg.Auth.ByHash()
	for plaintext, want := range map[string]struct {
		name  string
		admin bool
	}{"sluice-demo-producer-key": {"producer", false}, "sluice-demo-admin-key": {"ops", true}} {
		k, ok := byHash[config.HashKey(plaintext)]
		switch {
		case !ok:
			t.Errorf("the example plaintext %q documented in deploy/sluice.yaml matches no key", plaintext)
		case k.Name != want.name || k.Admin != want.admin:
			t.Errorf("key for %q: name %q admin %v, want %q %v", plaintext, k.Name, k.Admin, want.name, want.admin)
		case k.FromPlaintext:
			t.Errorf("key %q is given in plaintext; list it by sha256", k.Name)
		}
	}
	if !strings.Contains(readFile(t, "deploy/sluice.yaml"), "sluice-demo-producer-key") {
		t.Error("deploy/sluice.yaml does not document its example plaintext key")
	}
	for _, tenant := range []string{"acme", "globex"} {
		if _, ok := cfg.Tenants[tenant]; !ok {
			t.Errorf("tenant %q missing", tenant)
		}
	}
	for _, limit := range []string{config.APILimitName, "search"} {
		if _, ok := cfg.Limits[limit]; !ok {
			t.Errorf("limit %q missing", limit)
		}
	}
	if len(cfg.Egress.Allow) != 0 {
		t.Errorf("egress.allow = %v, want nothing opened", cfg.Egress.Allow)
	}
}

func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// goSources concatenates the non-test Go files of dir.
func goSources(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		b.Write(data)
	}
	return b.String(), nil
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestComposeCommandsParse runs each Sluice binary the compose file starts
// with its compose command and "-h" appended: the binary parses every flag
// before the -h, so it exits 2 (help) when all of them are its own and 1
// ("flag provided but not defined") otherwise. It builds the binaries, so
// -short skips it; a binary whose cmd/ directory does not exist yet is
// skipped with a note.
func TestComposeCommandsParse(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	c := loadCompose(t)
	for _, svc := range sluiceServices {
		t.Run(svc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := os.Stat(filepath.Join(repoRoot, "cmd", svc.name)); err != nil {
				t.Skipf("cmd/%s does not exist yet", svc.name)
			}
			s := c.service(t, svc.name)
			bin := filepath.Join(t.TempDir(), svc.name)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			build := exec.CommandContext(ctx, goTool, "build", "-o", bin, "./cmd/"+svc.name)
			build.Dir = repoRoot
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go build ./cmd/%s: %v\n%s", svc.name, err, out)
			}
			args := slices.Clone(s.Command[1:])
			for i, a := range args {
				if host := s.hostPath(a); host != "" {
					args[i] = host
				}
			}
			run := exec.CommandContext(ctx, bin, append(args, "-h")...)
			run.Env = []string{} // only what the compose file sets
			for k, v := range s.Environment {
				run.Env = append(run.Env, k+"="+v)
			}
			out, err := run.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Errorf("%s %q -h: %v, want exit status 2 (help after the flags parsed)\n%s", svc.name, args, err, out)
			}
		})
	}
}

package deploytest

import (
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// alertRules is the part of deploy/alerts.yml the test reads.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// The alerts issue #31 asks for; internal/e2e's TestAlerts provokes each.
var wantAlerts = []string{"SluiceBacklogNotDraining", "SluiceDeadLettersRising", "SluiceNoWorkerCapacity",
	"SluiceRedisUnavailable", "SluiceShardsUnheld", "SluiceStorageNearFull"}

// TestAlertRules checks deploy/alerts.yml: promtool accepts it (Debian's
// prometheus package, which scripts/test installs), deploy/prometheus.yml
// loads it and the compose file mounts it beside that file, each rule has a
// severity and a summary and queries only known Sluice metrics and their
// labels, and the alerts are the ones promised.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	file := filepath.Join(repoRoot, "deploy", "alerts.yml")
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not installed (scripts/test installs Debian's prometheus package): %v", err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", file, err, out)
	}
	var pc struct {
		RuleFiles []string `yaml:"rule_files"`
	}
	decodeYAML(t, filepath.Join(repoRoot, "deploy", "prometheus.yml"), &pc)
	if !slices.Contains(pc.RuleFiles, "alerts.yml") {
		t.Errorf("deploy/prometheus.yml rule_files %v, want alerts.yml", pc.RuleFiles)
	}
	if host := loadCompose(t).service(t, "prometheus").hostPath("/etc/prometheus/alerts.yml"); filepath.Clean(host) != filepath.Clean(file) {
		t.Errorf("compose mounts %q at /etc/prometheus/alerts.yml, want deploy/alerts.yml", host)
	}
	var rules alertRules
	decodeYAML(t, file, &rules)
	var names []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
			where := "deploy/alerts.yml: " + r.Alert
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: want a severity label, a summary and a description", where)
			}
			checkQuery(t, where, r.Expr, "")
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, wantAlerts) {
		t.Errorf("alerts %v, want %v", names, wantAlerts)
	}
}

package config

import (
	"slices"
	"strings"
	"testing"
)

// TestReloadChanges: Changes names each changed key of the reloadable
// sections, never a value; RestartOnly names each other section changed;
// Problems lists a refused file's problems one by one.
func TestReloadChanges(t *testing.T) {
	const base = `
auth: {keys: [{name: ops, key: ops-key, admin: true}]}
tenants:
  acme: {rate: 5/s, webhook_secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]}
  globex: {rate: 1/s}
upstreams: {sms: {rate: 10/s}}
limits: {search: {algorithm: gcra, rate: 1/s, burst: 2}}
`
	running, err := loadString(t, base)
	if err != nil {
		t.Fatal(err)
	}
	next, err := loadString(t, strings.NewReplacer(
		"ops-key", "other-key", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
		"  globex: {rate: 1/s}\n", "", "burst: 2", "burst: 3").Replace(base)+"log: {level: debug}\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"auth.keys.ops: changed", "tenants.globex: removed", "tenants.acme: changed", "limits.search: changed"} // per section: removed, then added or changed
	if got := Changes(running, next); !slices.Equal(got, want) {
		t.Errorf("Changes = %q, want %q", got, want)
	}
	if got := RestartOnly(running, next); len(got) != 1 || !strings.HasPrefix(got[0], "log: changed") {
		t.Errorf("RestartOnly = %q, want log only", got)
	}
	if got := Changes(running, running); len(got) != 0 {
		t.Errorf("Changes of a file with itself = %q", got)
	}
	_, err = loadString(t, "limits: {search: {algorithm: gcra, rate: 1/s, burst: 0}}\nworker: {concurrency: -1}\n")
	if got := Problems(err); len(got) != 2 || !strings.HasPrefix(got[0], "limits.search.burst") || !strings.HasPrefix(got[1], "worker.concurrency") {
		t.Errorf("Problems = %q, want limits.search.burst and worker.concurrency", got)
	}
}

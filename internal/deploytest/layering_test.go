package deploytest

import (
	"go/build"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sluicehq/sluice"

// moduleDir is the module root, from this file's place in it.
func moduleDir(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// sluiceDeps is every package of this module that pkg (a path below the
// module, e.g. "internal/wire") imports, directly or not, tests excluded.
func sluiceDeps(t *testing.T, root, pkg string) []string {
	t.Helper()
	seen := map[string]bool{}
	var visit func(rel string)
	visit = func(rel string) {
		p, err := build.ImportDir(filepath.Join(root, rel), 0)
		if err != nil {
			t.Fatalf("read package %s: %v", rel, err)
		}
		for _, imp := range p.Imports {
			dep, ok := strings.CutPrefix(imp, module+"/")
			if !ok || seen[dep] {
				continue
			}
			seen[dep] = true
			visit(dep)
		}
	}
	visit(pkg)
	deps := make([]string, 0, len(seen))
	for d := range seen {
		deps = append(deps, d)
	}
	slices.Sort(deps)
	return deps
}

// TestPackageLayering keeps the dependency rules ARCHITECTURE.md states:
// the wire contract and the tuning defaults import no Sluice package; the
// configuration does not import the engine; the HTTP sender does not
// reach into the Redis layer or the dispatcher; workers and the public task
// middleware do not depend on the dispatch loop; the script runner and the
// version stand alone; the public client imports no Sluice package and
// the sluice CLI only the client.
func TestPackageLayering(t *testing.T) {
	t.Parallel()
	root := moduleDir(t)
	for _, rule := range []struct {
		pkg    string
		banned []string // packages of this module it must not depend on
		none   bool     // it must depend on no package of this module
		only   []string // when set, the only packages of this module it may depend on
	}{
		{pkg: "internal/wire", none: true},
		// The public client talks HTTP only; the CLI is built on it alone.
		{pkg: "client", none: true},
		{pkg: "cmd/sluice", only: []string{"client"}},
		{pkg: "internal/redisscript", none: true},
		{pkg: "internal/version", none: true},
		{pkg: "internal/tuning", none: true},
		// The configuration maps YAML onto the parts' settings; it reads their
		// defaults and bounds from internal/tuning, not from the engine, and
		// the binaries build the engine's config structs from it.
		{pkg: "internal/config", banned: []string{"internal/store", "internal/dispatch", "internal/worker", "internal/api"}},
		{pkg: "internal/webhook", banned: []string{"internal/store", "internal/dispatch", "internal/worker", "internal/api"}},
		{pkg: "internal/worker", banned: []string{"internal/dispatch", "internal/api", "internal/config"}},
		{pkg: "sluicetask", banned: []string{"internal/dispatch", "internal/api", "internal/config"}},
		{pkg: "internal/store", banned: []string{"internal/dispatch", "internal/worker", "internal/api", "internal/webhook", "internal/config"}},
		// The upstream registry and coordinator and the worker roster lie
		// below the store, which embeds them: they keep to their own slots.
		{pkg: "internal/quota", banned: []string{"internal/store", "internal/dispatch", "internal/worker", "internal/api", "internal/webhook", "internal/config", "internal/job", "internal/fleet"}},
		{pkg: "internal/fleet", banned: []string{"internal/store", "internal/dispatch", "internal/worker", "internal/api", "internal/webhook", "internal/config", "internal/job", "internal/quota"}},
		{pkg: "internal/policy", banned: []string{"internal/store", "internal/dispatch", "internal/worker", "internal/api", "internal/config"}},
		{pkg: "internal/jobview", banned: []string{"internal/dispatch", "internal/worker", "internal/api", "internal/config"}},
		// The upstream rules are pure and below job and policy, which use them.
		{pkg: "internal/upstream", banned: []string{"internal/store", "internal/dispatch", "internal/worker", "internal/api", "internal/config", "internal/policy", "internal/job"}},
		{pkg: "internal/job", banned: []string{"internal/store", "internal/dispatch", "internal/worker", "internal/api", "internal/config", "internal/policy"}},
		// Job acceptance reads the tenant through its own interface, not the store.
		{pkg: "internal/accept", banned: []string{"internal/store", "internal/dispatch", "internal/worker", "internal/api", "internal/config"}},
	} {
		deps := sluiceDeps(t, root, rule.pkg)
		if rule.none && len(deps) > 0 {
			t.Errorf("%s imports %v: it must import no package of this module", rule.pkg, deps)
		}
		for _, d := range deps {
			if rule.only != nil && !slices.Contains(rule.only, d) {
				t.Errorf("%s depends on %s: it may depend only on %v", rule.pkg, d, rule.only)
			}
		}
		for _, b := range rule.banned {
			if slices.Contains(deps, b) {
				t.Errorf("%s depends on %s (its imports: %v)", rule.pkg, b, deps)
			}
		}
	}
	if _, err := build.ImportDir(filepath.Join(root, "internal", "dispatcher"), 0); err == nil {
		t.Error("internal/dispatcher exists again: the dispatcher is internal/dispatch")
	}
}

// TestClientStandardLibraryOnly keeps the public client and the sluice CLI
// free of third-party modules: a program that imports the client pulls in
// nothing but the standard library.
func TestClientStandardLibraryOnly(t *testing.T) {
	t.Parallel()
	root := moduleDir(t)
	for _, pkg := range []string{"client", "cmd/sluice"} {
		p, err := build.ImportDir(filepath.Join(root, pkg), 0)
		if err != nil {
			t.Fatalf("read package %s: %v", pkg, err)
		}
		for _, imp := range p.Imports {
			first, _, _ := strings.Cut(imp, "/")
			if strings.Contains(first, ".") && !strings.HasPrefix(imp, module+"/") {
				t.Errorf("%s imports %s: only the standard library (and, for the CLI, the client) may be imported", pkg, imp)
			}
		}
	}
}

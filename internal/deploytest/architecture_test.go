package deploytest

import (
	"errors"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// notPictured are the packages ARCHITECTURE.md's picture leaves out on
// purpose: test support, each a prefix of package paths below the module
// root. (The benchmark and report programs are a module of their own,
// bench/, which the walk skips.)
var notPictured = []string{
	"internal/redistest",
	"internal/deliverytest",
	"internal/chaos",
	"internal/e2e",
	"internal/deploytest",
	"internal/procstat",
	"internal/throttlertest",
}

// packageLabel is a Mermaid node label that names a package: its path
// below the module root, e.g. store["internal/store"]. Other labels have a
// space or a capital letter.
var packageLabel = regexp.MustCompile(`\["([a-z0-9_]+(?:/[a-z0-9_]+)*)"\]`)

// modulePackages is every package of the module rooted at root, as paths
// below it ("internal/store", "sluicetask"), found the way go list finds
// them: directories with buildable Go files, skipping testdata, directories
// whose names start with "." or "_", and nested modules (their own go.mod).
func modulePackages(t *testing.T, root string) []string {
	t.Helper()
	var pkgs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if path != root {
			name := d.Name()
			if name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		if _, err := build.ImportDir(path, 0); err != nil {
			var none *build.NoGoError
			if errors.As(err, &none) {
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		pkgs = append(pkgs, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatalf("walk the module: %v", err)
	}
	return pkgs
}

// pictured is every package node of ARCHITECTURE.md's Mermaid picture.
func pictured(t *testing.T, root string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatalf("ARCHITECTURE.md: %v", err)
	}
	_, rest, ok := strings.Cut(string(b), "```mermaid\n")
	if !ok {
		t.Fatal("ARCHITECTURE.md has no ```mermaid block")
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("ARCHITECTURE.md's ```mermaid block is not closed")
	}
	var pkgs []string
	for _, m := range packageLabel.FindAllStringSubmatch(block, -1) {
		if !slices.Contains(pkgs, m[1]) {
			pkgs = append(pkgs, m[1])
		}
	}
	return pkgs
}

// TestArchitecturePictureMatchesPackages checks that ARCHITECTURE.md's
// picture shows every package of the module but test support
// (notPictured), and nothing that is not a package.
func TestArchitecturePictureMatchesPackages(t *testing.T) {
	t.Parallel()
	root := moduleDir(t)
	var want []string
	for _, p := range modulePackages(t, root) {
		if !slices.ContainsFunc(notPictured, func(skip string) bool {
			return p == skip || strings.HasPrefix(p, skip)
		}) {
			want = append(want, p)
		}
	}
	if len(want) == 0 {
		t.Fatal("found no package in the module: the walk is broken")
	}
	got := pictured(t, root)
	var missing, extra []string
	for _, p := range want {
		if !slices.Contains(got, p) {
			missing = append(missing, p)
		}
	}
	for _, p := range got {
		if !slices.Contains(want, p) {
			extra = append(extra, p)
		}
	}
	if len(missing) > 0 {
		t.Errorf("ARCHITECTURE.md's picture is missing packages %q: add a node per package, labelled with its path (e.g. x[\"internal/x\"]), or list test support in notPictured", missing)
	}
	if len(extra) > 0 {
		t.Errorf("ARCHITECTURE.md's picture shows packages that do not exist: %q", extra)
	}
}

package version

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	const rev = "0123456789abcdef0123456789abcdef01234567"
	cases := []struct {
		name  string
		stamp string
		info  *debug.BuildInfo
		want  string
	}{
		{"no build info", "", nil, Unknown},
		{"devel, no vcs", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, Unknown},
		{"stamp wins", "v1.2.3-4-gabcdef0-dirty", &debug.BuildInfo{Main: debug.Module{Version: "v1.0.0"}}, "v1.2.3-4-gabcdef0-dirty"},
		{"module version", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.2"}, Settings: vcs(rev, "false")}, "v1.4.2"},
		{"clean revision", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "false")}, "0123456789ab"},
		{"dirty revision", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "true")}, "0123456789ab-dirty"},
		{"short revision", "", &debug.BuildInfo{Settings: vcs("abc", "")}, "abc"},
	}
	for _, tc := range cases {
		if got := resolve(tc.stamp, tc.info); got != tc.want {
			t.Errorf("%s: resolve = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestUserAgent(t *testing.T) {
	t.Parallel()
	if ua := UserAgent(); ua != "Sluice/"+String() || strings.ContainsAny(String(), " \r\n") || String() == "" {
		t.Fatalf("UserAgent() = %q with String() = %q: want Sluice/ + a non-empty token", ua, String())
	}
}

// TestBuiltBinary builds a binary with the stamp scripts/run and the
// Dockerfile pass (-ldflags -X …Stamp=) and checks that it sends that
// version, not Unknown.
func TestBuiltBinary(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build with: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "useragent")
	const stamp = "v1.2.3-4-gabcdef0-dirty"
	build := exec.Command(gobin, "build", "-ldflags", "-X github.com/sluicehq/sluice/internal/version.Stamp="+stamp,
		"-o", bin, "./testdata/useragent")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "Sluice/"+stamp {
		t.Fatalf("the built binary's User-Agent is %q, want %q (not Sluice/%s)", got, "Sluice/"+stamp, Unknown)
	}
}

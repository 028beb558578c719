package console

import (
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func serve(t *testing.T) *httptest.Server {
	t.Helper()
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "api "+r.URL.Path) })
	h, err := With(api)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func fetch(t *testing.T, c *http.Client, method, url string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// Every /ui/ answer carries the security headers; pages and modules are
// served with their types; other methods are refused; other paths reach
// the API.
func TestServesWithSecurityHeaders(t *testing.T) {
	t.Parallel()
	srv := serve(t)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for path, ctype := range map[string]string{"/ui/": "text/html", "/ui/app.js": "text/javascript",
		"/ui/style.css": "text/css", "/ui/chart.js": "text/javascript", "/ui/nope.js": "text/plain"} {
		resp, body := fetch(t, srv.Client(), "GET", srv.URL+path)
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) {
			t.Errorf("%s: Content-Type %q, want %s", path, resp.Header.Get("Content-Type"), ctype)
		}
		for k, v := range Headers {
			if k == "Cache-Control" && resp.StatusCode == http.StatusNotFound {
				continue // the file server's error clears it: nothing to cache
			}
			if resp.Header.Get(k) != v {
				t.Errorf("%s: %s = %q, want %q", path, k, resp.Header.Get(k), v)
			}
		}
		if path == "/ui/" && !strings.Contains(body, `<script type="module" src="app.js">`) {
			t.Errorf("index: %s", body)
		}
	}
	csp := Headers["Content-Security-Policy"]
	if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || Headers["X-Frame-Options"] != "DENY" ||
		Headers["Referrer-Policy"] != "no-referrer" {
		t.Fatalf("headers %v", Headers)
	}
	if resp, _ := fetch(t, srv.Client(), "POST", srv.URL+"/ui/"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/: %d", resp.StatusCode)
	}
	if resp, _ := fetch(t, noRedirect, "GET", srv.URL+"/ui"); resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("/ui: %d → %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if _, body := fetch(t, srv.Client(), "GET", srv.URL+"/v1/summary"); body != "api /v1/summary" {
		t.Errorf("/v1/summary reached %q", body)
	}
}

// The pages work offline and under the CSP: no inline script or style, no
// event handler attributes, nothing loaded from another host, no cookie,
// no innerHTML (API data is never parsed as markup), no localStorage.
func TestStaticFilesAreSelfContained(t *testing.T) {
	t.Parallel()
	banned := map[string]*regexp.Regexp{
		"inline script":   regexp.MustCompile(`<script(?:[^>](?:[^s]|s[^r]|sr[^c]))*>`),
		"style attribute": regexp.MustCompile(`\sstyle=`),
		"handler attr":    regexp.MustCompile(`\son[a-z]+="`),
		"foreign URL":     regexp.MustCompile(`(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}/`),
		"cookie":          regexp.MustCompile(`document\.cookie`),
		"innerHTML":       regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write`),
		"localStorage":    regexp.MustCompile(`localStorage`),
		"eval":            regexp.MustCompile(`\beval\(|new Function\(`),
	}
	n := 0
	err := fs.WalkDir(static, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		raw, err := fs.ReadFile(static, path)
		if err != nil {
			return err
		}
		text := strings.ReplaceAll(string(raw), "http://www.w3.org/2000/svg", "") // the SVG namespace, not a fetch
		for what, re := range banned {
			if m := re.FindString(text); m != "" {
				t.Errorf("%s: %s: %q", path, what, m)
			}
		}
		return nil
	})
	if err != nil || n < 8 {
		t.Fatalf("walked %d files: %v", n, err)
	}
}

// fmtRate (ui.js) shows a slow rate in the unit where it is at least 1, so
// a daily quota does not read "0/s". Runs ui.js in node when it is there.
func TestFmtRateShowsSlowRatesInTheirUnit(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	dir := t.TempDir()
	raw, err := fs.ReadFile(static, "static/ui.js")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ui.mjs"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	script := `import { fmtRate } from './ui.mjs';
console.log(JSON.stringify([50, 1.5, 0.5, 1 / 60, 1 / 3600, 7 / 86400, 1 / 86400, 0, null].map(fmtRate)));`
	if err := os.WriteFile(filepath.Join(dir, "t.mjs"), []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, filepath.Join(dir, "t.mjs")).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var got []string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node printed %q: %v", out, err)
	}
	want := []string{"50/s", "1.50/s", "30/m", "1/m", "1/h", "7/d", "1/d", "0/s", "–"}
	if !slices.Equal(got, want) {
		t.Fatalf("fmtRate = %q, want %q", got, want)
	}
}

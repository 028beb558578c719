package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browserStep bounds one browser step (a navigation, a wait for an element).
const browserStep = 30 * time.Second

// browser is one headless Chromium (Debian's `chromium`; scripts/test
// installs it when missing) driven by chromedp; its tabs share nothing but
// the process, so each has its own sessionStorage (its own sign-in).
type browser struct {
	t     *testing.T
	alloc context.Context
	mu    sync.Mutex
	errs  []string // uncaught exceptions of any tab's pages
}

// newBrowser starts Chromium headless, without a sandbox (tests run as
// root in containers), at a fixed window size for the screenshots. A
// machine without Chromium fails the test.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("the console's browser tests need Debian's chromium (apt-get install -y chromium; scripts/test installs it): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 1000), chromedp.Flag("disable-dev-shm-usage", true))
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	return &browser{t: t, alloc: alloc}
}

// tab opens a new tab; uncaught page exceptions are collected and fail the
// test at its end.
func (b *browser) tab() context.Context {
	b.t.Helper()
	ctx, cancel := chromedp.NewContext(b.alloc)
	b.t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil { // starts the browser (first tab) or the tab
		b.t.Fatalf("start chromium: %v", err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() {
				b.mu.Lock()
				b.errs = append(b.errs, m.String())
				b.mu.Unlock()
			}
		}
	}()
	b.t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.errs) > 0 {
			b.t.Errorf("uncaught exceptions in the console's pages: %s", strings.Join(b.errs, "; "))
			b.errs = nil
		}
	})
	return ctx
}

// run runs steps in the tab within browserStep, failing the test with what
// on error.
func (b *browser) run(tab context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	runIn(b, tab, what, chromedp.Steps(steps...))
}

// runIn runs one action in the tab within browserStep and returns its value.
func runIn[T any](b *browser, tab context.Context, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(tab, browserStep)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		text, _ := chromedp.Run(tab, chromedp.Text(chromedp.CSS("main")))
		b.t.Fatalf("browser: %s: %v\npage: %s", what, err, text)
	}
	return v
}

// waitJS waits until the JavaScript expression is truthy.
func (b *browser) waitJS(tab context.Context, what, expr string) {
	b.t.Helper()
	runIn(b, tab, what, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(browserStep)))
}

// evalJS evaluates a JavaScript expression in the tab, awaiting a promise.
func evalJS[T any](b *browser, tab context.Context, what, expr string) T {
	b.t.Helper()
	return runIn(b, tab, what, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}

// screenshot saves the tab's page as a PNG under the repository's
// .sluice/ui/ (made if missing).
func (b *browser) screenshot(tab context.Context, name string) {
	b.t.Helper()
	png := runIn(b, tab, "screenshot "+name, chromedp.FullScreenshot(100))
	dir := filepath.Join("..", "..", ".sluice", "ui")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: .sluice/ui/%s (%d bytes)", name, len(png))
}

package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/console"
)

// A 503 with Retry-After at sign-in (the summary's first read over 100 000
// tenants outlasts a request: errSummaryReading) is waited out by the
// console itself: it says when it asks again and then shows the overview,
// with no click. The API here is a stand-in that answers /v1/summary 503
// once: a real throttler gives that answer only when a cold read takes
// longer than a request (minutes of seeding), and what is under test is
// the page's handling of the answer, not the server's.
func TestConsoleSignInWaitsOutABusySummary(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/summary" || r.Header.Get("Authorization") != "Bearer busy-key" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"code":"unavailable","message":"the summary is still being read"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"key":{"name":"ops","admin":true,"tenants":[]},"at":"2026-12-02T00:00:00Z",`+
			`"tenants":3,"backlog":0,"in_flight":0,"deliveries_per_s":0,"dead_letters":0,"paused":0,"disabled":0,`+
			`"workers":1,"worker_capacity":100,"throttlers":[],"unowned_shards":[],"attention":[],"busiest":[]}`)
	})
	h, err := console.With(api)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	b := newBrowser(t)
	tab := b.tab()
	b.run(tab, "sign in", chromedp.Navigate(srv.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS(`#signin-key`)),
		chromedp.SendKeys(chromedp.CSS(`#signin-key`), "busy-key"), chromedp.Click(chromedp.CSS(`#signin-submit`)))
	b.waitJS(tab, "the wait is shown", `(document.querySelector('#signin-retry')?.textContent || '').includes('Asking again in 1 s')`)
	if got := evalJS[string](b, tab, "the error", `document.querySelector('#signin-error').textContent`); got != "503 the summary is still being read" {
		t.Errorf("error line %q, want the 503 and its message", got)
	}
	b.waitJS(tab, "the overview after the wait", `document.querySelector('#total-tenants .v')?.textContent === '3'`)
	if who := evalJS[string](b, tab, "who", `document.querySelector('#who').textContent`); who != "ops (admin)" {
		t.Errorf("signed in as %q, want ops (admin)", who)
	}
	if n := calls.Load(); n < 2 {
		t.Errorf("GET /v1/summary called %d times, want the 503 and at least one more", n)
	}
}

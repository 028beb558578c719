package main

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/worker"
)

// pacerSlack is how long before each instant the pacer stops sleeping
// (worker.PreciseSleep, the worker's scheduler's sleep) and yields in a
// loop instead, as that scheduler does.
const pacerSlack = 100 * time.Microsecond

// runPacer is the precision part's control: one goroutine on its own OS
// thread POSTs to url at the exact instants start + i·T, i < n, as a
// dispatcher with no Redis, no queue and no claim would — a timer wake-up,
// a loopback request and the receiver's handler, nothing else. Run beside
// Sluice in the same window, its |gap − T| at the receiver is what the
// machine allows at that moment: on a busy 2-core machine the other
// processes' bursts delay its wake-ups as they delay the worker's. It
// returns when the n requests are sent or ctx ends.
func runPacer(ctx context.Context, url string, T time.Duration, n int, start time.Time) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	client := &http.Client{Timeout: 5 * time.Second}
	for i := range n {
		at := start.Add(time.Duration(i) * T)
		for {
			d := time.Until(at)
			if d <= 0 {
				break
			}
			if d > pacerSlack {
				worker.PreciseSleep(d - pacerSlack)
			} else {
				runtime.Gosched()
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{}`))
		if err != nil {
			return err
		}
		req.Header.Set("webhook-id", fmt.Sprintf("pacer-%d", i))
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("pacer request %d: %w", i, err)
		}
		_ = resp.Body.Close()
	}
	return nil
}

package redistest

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// PollInterval is how often Poll and Hold check their condition.
const PollInterval = 5 * time.Millisecond

// Poll checks cond every PollInterval until it holds, failing t with what
// when it does not within the deadline. It is how tests wait for an effect
// they cannot be signalled about.
func Poll(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	PollMsg(t, within, func() (bool, string) { return cond(), what })
}

// PollMsg is Poll with a condition that also says what it saw: the failure
// names the last message.
func PollMsg(t testing.TB, within time.Duration, cond func() (done bool, msg string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		done, msg := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, msg)
		}
		<-tick.C
	}
}

// Hold checks cond every PollInterval for d, failing t with what as soon as
// it does not hold: how tests show that something does not happen.
func Hold(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		if !cond() {
			t.Fatalf("within %s: %s", d, what)
		}
		<-tick.C
	}
	if !cond() {
		t.Fatalf("after %s: %s", d, what)
	}
}

// SyncBuffer is a bytes.Buffer safe for a logger and a test at once.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

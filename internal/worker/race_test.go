//go:build race

package worker_test

// raceEnabled: the race detector slows every goroutine several-fold; timing
// bounds that hold at the receiver without it get a wider margin with it.
const raceEnabled = true

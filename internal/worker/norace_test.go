//go:build !race

package worker_test

// raceEnabled: see race_test.go.
const raceEnabled = false

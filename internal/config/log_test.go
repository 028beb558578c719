package config

import (
	"log/slog"
	"slices"
	"testing"
)

// TestLogAsynq: asynq's own lines default to warn whatever log.level says
// (at debug they flood the worker's log with "All queues are empty");
// log.asynq lowers or raises that, and only takes the four level names.
func TestLogAsynq(t *testing.T) {
	t.Parallel()
	for yaml, want := range map[string]slog.Level{
		"":                                    slog.LevelWarn,
		"log: {level: debug}\n":               slog.LevelWarn,
		"log: {level: debug, asynq: debug}\n": slog.LevelDebug,
		"log: {asynq: info}\n":                slog.LevelInfo,
		"log: {asynq: error}\n":               slog.LevelError,
	} {
		c, err := loadString(t, yaml)
		if err != nil {
			t.Fatalf("%q: %v", yaml, err)
		}
		if got := c.Log.AsynqSlogLevel(); got != want {
			t.Errorf("%q: AsynqSlogLevel() = %v, want %v", yaml, got, want)
		}
	}
	if got := (LogConfig{}).AsynqSlogLevel(); got != slog.LevelWarn {
		t.Errorf("unset (no defaults applied): AsynqSlogLevel() = %v, want warn", got)
	}
	_, err := loadString(t, "log: {asynq: loud}\n")
	if got := problemFields(t, err); !slices.Equal(got, []string{"log.asynq"}) {
		t.Errorf("asynq: loud: problems %v (%v), want log.asynq", got, err)
	}
}

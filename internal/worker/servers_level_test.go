package worker

import (
	"log/slog"
	"testing"

	"github.com/hibiken/asynq"
)

// TestAsynqLevel: each slog level maps to asynq's level of the same name; a
// level between two maps to the higher one, so nothing below the configured
// level gets through.
func TestAsynqLevel(t *testing.T) {
	t.Parallel()
	for level, want := range map[slog.Level]asynq.LogLevel{
		slog.LevelDebug - 4: asynq.DebugLevel,
		slog.LevelDebug:     asynq.DebugLevel,
		slog.LevelDebug + 1: asynq.InfoLevel,
		slog.LevelInfo:      asynq.InfoLevel,
		slog.LevelInfo + 2:  asynq.WarnLevel,
		slog.LevelWarn:      asynq.WarnLevel,
		slog.LevelWarn + 1:  asynq.ErrorLevel,
		slog.LevelError:     asynq.ErrorLevel,
		slog.LevelError + 4: asynq.ErrorLevel,
	} {
		if got := asynqLevel(level); got != want {
			t.Errorf("asynqLevel(%v) = %v, want %v", level, got, want)
		}
	}
}

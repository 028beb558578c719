package worker

import (
	"testing"

	"github.com/sluicehq/sluice/internal/wire"
)

// TestKindIndexNamesEachKind: an attempt counts under its kind's name
// (wire.FinishKind.String), an unknown kind under "other".
func TestKindIndexNamesEachKind(t *testing.T) {
	for k := wire.FinishSuccess; k <= wire.FinishDeferred; k++ {
		if got := attemptKinds[kindIndex(k)]; got != k.String() {
			t.Errorf("kind %d counts as %q, want %q", k, got, k.String())
		}
	}
	for _, k := range []wire.FinishKind{0, wire.FinishLapsed + 1, 255} {
		if got := attemptKinds[kindIndex(k)]; got != "other" {
			t.Errorf("kind %d counts as %q, want other", k, got)
		}
	}
}

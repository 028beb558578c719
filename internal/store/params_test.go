package store

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
)

func TestDefaultParamsAreValid(t *testing.T) {
	t.Parallel()
	if err := DefaultParams().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestParamsValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	p := DefaultParams()
	p.RateUS, p.Burst, p.Adaptive = 0, policy.MaxBurst+1, 2
	err := p.Validate()
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
	for _, field := range []string{"rate_us", "burst", "adaptive"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("%q does not name %s", err, field)
		}
	}
	if err := (Overrides{Concurrency: ptr(0), MaxDoublings: ptr(63)}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "concurrency") || !strings.Contains(err.Error(), "max_doublings") {
		t.Fatalf("overrides: %v", err)
	}
}

func TestOverridesApplyOnlySetFields(t *testing.T) {
	t.Parallel()
	base := DefaultParams()
	got := Overrides{Burst: ptr(9), Adaptive: ptr(0)}.Apply(base)
	want := base
	want.Burst, want.Adaptive = 9, 0
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if full := base.Full().Apply(Params{}); !reflect.DeepEqual(full, base) {
		t.Fatalf("Full round trip: %+v", full)
	}
}

func TestLuaTableOfDefaults(t *testing.T) {
	t.Parallel()
	got := Params{RateUS: 5, Burst: 2}.luaTable()
	if !strings.HasPrefix(got, "{adaptive=0,admit_burst=0,") || !strings.Contains(got, ",burst=2,") || !strings.Contains(got, ",rate_us=5,") {
		t.Fatalf("luaTable: %s", got)
	}
}

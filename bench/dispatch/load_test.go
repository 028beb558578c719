package main

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestCheck429(t *testing.T) {
	body := []byte(`{"error":{"code":"rate_limited","message":"tenant noisy: admission: retry in 1s"}}`)
	hdr := func(ra, rl string) http.Header {
		return http.Header{"Retry-After": {ra}, "Ratelimit": {rl}}
	}
	for _, c := range []struct {
		name string
		a    answer
		cost int
		rate float64
		want string // "" or a part of the problem
	}{
		{"right", answer{429, hdr("1", `"admit";r=0;t=1, "api";r=5;t=60`), body}, 1, 4, ""},
		{"right, cost 8 at 4/s", answer{429, hdr("2", `"admit";r=3;t=2, "api";r=5;t=60`), body}, 8, 4, ""},
		{"longer than cost/rate", answer{429, hdr("3", `"admit";r=0;t=3`), body}, 8, 4, "want 1 … 2"},
		{"zero", answer{429, hdr("0", `"admit";r=0;t=0`), body}, 1, 4, "want 1 … 1"},
		{"missing", answer{429, hdr("", `"admit";r=0;t=1`), body}, 1, 4, "Retry-After"},
		{"t differs", answer{429, hdr("1", `"admit";r=0;t=2, "api";r=5;t=1`), body}, 1, 4, "admit t"},
		{"no admit limit", answer{429, hdr("1", `"api";r=5;t=1`), body}, 1, 4, "admit t"},
		{"backlog_full", answer{429, hdr("1", `"admit";r=0;t=1`), []byte(`{"error":{"code":"backlog_full","message":"x"}}`)}, 1, 4, "body"},
		{"not the error shape", answer{429, hdr("1", `"admit";r=0;t=1`), []byte(`{"code":"rate_limited"}`)}, 1, 4, "body"},
	} {
		got := check429(c.a, c.cost, c.rate)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: check429 = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestKeyScanVerdict(t *testing.T) {
	keep := permanentKeys("sluice")
	ks := keyScan{
		"sluice:meta":                      -1,
		"sluice:{s3}:policy":               -1,
		"sluice:{s3}:vclock":               -1,
		"sluice:dispatch:lease:3":          2 * time.Second,
		"sluice:workers":                   -1,
		"asynq:queues":                     -1,
		"asynq:{sluice:webhook}:processed": -1,
		"asynq:{sluice:webhook}:t:j3_01ABCDEFGHJKMNPQRSTVWXYZ01:2": -1, // a task left behind
		"sluice:{s3}:t:acme":                          -1, // a tenant without a TTL
		"sluice:{s3}:t:acme:q":                        -1,
		"sluice:{s5}:idem:beta:k1":                    time.Hour, // expiring
		"sluice:{s5}:j:j5_01ABCDEFGHJKMNPQRSTVWXYZ01": time.Minute,
	}
	orphans, expiring, tenants, detail := ks.verdict(keep)
	if orphans != 3 || expiring != 2 || tenants != 2 {
		t.Errorf("verdict = %d orphans, %d expiring, %d tenants (%s); want 3, 2, 2", orphans, expiring, tenants, detail)
	}
	if !strings.Contains(detail, "5 permanent") || !strings.Contains(detail, "3 asynq's own") {
		t.Errorf("detail %q: want 5 permanent and 3 asynq keys", detail)
	}
	if n := ks.sluiceLeft(keep); n != 4 {
		t.Errorf("sluiceLeft = %d, want 4", n)
	}
	if !regexp.MustCompile(`e\.g\. .*sluice:\{s3\}:t:acme`).MatchString(detail) {
		t.Errorf("detail %q names no orphan", detail)
	}
}

func TestLimitT(t *testing.T) {
	h := `"admit";r=0;t=3, "api";r=998;t=60`
	if v, ok := limitT(h, "admit"); !ok || v != 3 {
		t.Errorf(`limitT(admit) = %d, %v; want 3, true`, v, ok)
	}
	if v, ok := limitT(h, "api"); !ok || v != 60 {
		t.Errorf(`limitT(api) = %d, %v; want 60, true`, v, ok)
	}
	if _, ok := limitT(h, "search"); ok {
		t.Error("limitT(search) found a limit the header does not list")
	}
}

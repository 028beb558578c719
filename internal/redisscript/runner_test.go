package redisscript

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// fresh is a script no Redis has seen: its source carries the test's prefix.
func fresh(prefix, lua string) *Script {
	return New("fresh", "-- "+prefix+"\n"+lua)
}

func loaded(t *testing.T, rdb redis.UniversalClient, s *Script) bool {
	t.Helper()
	ok, err := rdb.ScriptExists(context.Background(), s.Hash()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ok[0]
}

// TestRunLoadsAScriptRedisDoesNotKnow: EVALSHA of a script Redis has never
// seen comes back NOSCRIPT; Run falls back to EVAL, which answers and leaves
// the script loaded.
func TestRunLoadsAScriptRedisDoesNotKnow(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	ctx := context.Background()
	s := fresh(prefix, "return tonumber(ARGV[1]) + 1")
	if loaded(t, rdb, s) {
		t.Fatal("script loaded before the first run")
	}
	r := NewRunner(rdb, nil)
	for want := range []int64{42, 42} { // the second run takes EVALSHA
		rep, err := r.Run(ctx, s, []string{prefix + ":k"}, 41)
		if err != nil {
			t.Fatalf("run %d: %v", want, err)
		}
		if n, err := rep.Int(); err != nil || n != 42 {
			t.Fatalf("run %d: reply %d, %v; want 42", want, n, err)
		}
		if !loaded(t, rdb, s) {
			t.Fatalf("run %d: script not loaded", want)
		}
	}
}

// TestBatchLoadsScriptsOnNoScript: a pipeline whose scripts Redis does not
// know (SCRIPT FLUSH here) gets them loaded and retried once; each call gets
// its own reply, in one pipeline per attempt.
func TestBatchLoadsScriptsOnNoScript(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	ctx := context.Background()
	a, b := fresh(prefix, "return {1, tonumber(ARGV[1])}"), fresh(prefix+"b", "return {2, tonumber(ARGV[1])}")
	r := NewRunner(rdb, nil)
	var calls []*Call
	for i := range 6 {
		s := a
		if i%2 == 1 {
			s = b
		}
		calls = append(calls, &Call{Script: s, Keys: []string{fmt.Sprintf("%s:%d", prefix, i)}, Args: []any{i}})
	}
	r.Batch(ctx, calls)
	for i, c := range calls {
		got := make([]int64, 2)
		if c.Err != nil {
			t.Fatalf("call %d: %v", i, c.Err)
		}
		if err := c.Reply.Ints(got); err != nil || got[0] != int64(i%2+1) || got[1] != int64(i) {
			t.Fatalf("call %d: reply %v, %v; want [%d %d]", i, got, err, i%2+1, i)
		}
	}
	if !loaded(t, rdb, a) || !loaded(t, rdb, b) {
		t.Fatal("scripts not loaded after the batch")
	}
}

// library is a one-function library whose function answers "function"
// where its script answers "script": the reply tells which path ran.
func library(prefix string) (lib func() string, fn string, s *Script) {
	name := "rs_" + regexp.MustCompile(`[^A-Za-z0-9_]`).ReplaceAllString(prefix, "_")
	fn = name + "_which"
	src := fmt.Sprintf("#!lua name=%s\nredis.register_function('%s', function(keys, args) return 'function' end)\n", name, fn)
	return func() string { return src }, fn, fresh(prefix, "return 'script'")
}

func which(t *testing.T, r *Runner, fn string, s *Script, key string) string {
	t.Helper()
	rep, err := r.RunFunction(context.Background(), fn, s, []string{key})
	if err != nil {
		t.Fatal(err)
	}
	v, ok := rep.v.(string)
	if !ok {
		t.Fatalf("reply %v (%T), want a string", rep.v, rep.v)
	}
	return v
}

// TestRunFunctionPaths: RunFunction takes FCALL (loading the library on the
// first call, and again after Redis lost it); after DisableFunctions, or on
// a Runner without a library, it runs the script by EVALSHA.
func TestRunFunctionPaths(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	ctx := context.Background()
	lib, fn, s := library(prefix)
	r := NewRunner(rdb, lib)
	if got := which(t, r, fn, s, prefix+":k"); got != "function" || !r.UsesFunctions() {
		t.Fatalf("first call ran the %s (functions %v), want the function", got, r.UsesFunctions())
	}
	libName := strings.SplitN(strings.TrimPrefix(lib(), "#!lua name="), "\n", 2)[0]
	if err := rdb.FunctionDelete(ctx, libName).Err(); err != nil {
		t.Fatal(err)
	}
	if got := which(t, r, fn, s, prefix+":k"); got != "function" {
		t.Fatalf("after the library was deleted the call ran the %s, want the function", got)
	}
	if loaded(t, rdb, s) {
		t.Fatal("the script was loaded although every call took FCALL")
	}
	r.DisableFunctions()
	if got := which(t, r, fn, s, prefix+":k"); got != "script" || r.UsesFunctions() {
		t.Fatalf("after DisableFunctions the call ran the %s (functions %v), want the script", got, r.UsesFunctions())
	}
	if got := which(t, NewRunner(rdb, nil), fn, s, prefix+":k"); got != "script" {
		t.Fatalf("without a library the call ran the %s, want the script", got)
	}
	_ = rdb.FunctionDelete(ctx, libName)
}

// TestRunFunctionFallsBackWithoutPermission: a user who may run scripts but
// not functions (NOPERM) gets the script, and the Runner stays on EVALSHA.
func TestRunFunctionFallsBackWithoutPermission(t *testing.T) {
	t.Parallel()
	admin, prefix := redistest.New(t)
	rdb := redistest.EvalOnlyClient(t, admin, prefix)
	lib, fn, s := library(prefix)
	r := NewRunner(rdb, lib)
	if got := which(t, r, fn, s, prefix+":k"); got != "script" || r.UsesFunctions() {
		t.Fatalf("without function permissions the call ran the %s (functions %v), want the script", got, r.UsesFunctions())
	}
}

// TestRepliesOfTheWrongShape: a reply that does not have the shape its
// reader wants is an error wrapping ErrUnexpectedReply that names the
// script — never redis.Nil; a status other than "ok" is the caller's typed
// error; a script error keeps Redis' message.
func TestRepliesOfTheWrongShape(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	r := NewRunner(rdb, nil)
	errRefused := errors.New("refused")
	refused := func(script, status string) error { return fmt.Errorf("%s said %s: %w", script, status, errRefused) }
	cases := []struct {
		lua  string
		read func(Reply) error
		want error  // errors.Is
		text string // in the message
	}{
		{"return nil", nil, ErrUnexpectedReply, "nil reply"},
		{"return {1, 2}", func(r Reply) error { _, err := r.Int(); return err }, ErrUnexpectedReply, "want an integer"},
		{"return 7", func(r Reply) error { return r.Ints(make([]int64, 4)) }, ErrUnexpectedReply, "want 4 integers"},
		{"return {1, 2, 3}", func(r Reply) error { return r.Ints(make([]int64, 4)) }, ErrUnexpectedReply, "want 4 integers"},
		{"return {1, 2, 3, 'x'}", func(r Reply) error { return r.Ints(make([]int64, 4)) }, ErrUnexpectedReply, "want an integer"},
		{"return 'ok'", func(r Reply) error { _, err := r.Status(refused); return err }, ErrUnexpectedReply, "reply is string"},
		{"return {}", func(r Reply) error { _, err := r.Status(refused); return err }, ErrUnexpectedReply, "reply is"},
		{"return {7}", func(r Reply) error { _, err := r.Status(refused); return err }, ErrUnexpectedReply, "want a string"},
		{"return {'not_found'}", func(r Reply) error { _, err := r.Status(refused); return err }, errRefused, "fresh said not_found"},
		{"return {'ok', 'x'}", func(r Reply) error {
			d, err := r.Status(refused)
			if err != nil {
				return err
			}
			d.Int(1)
			return d.Err()
		}, ErrUnexpectedReply, "element 1: want an integer"},
		{"return {'ok', {1}}", func(r Reply) error {
			d, _ := r.Status(refused)
			d.List(1).Str(3)
			return d.Err()
		}, ErrUnexpectedReply, "element 3 of a 1-element reply"},
		{"return {'ok', 'a', 'b', 'c'}", func(r Reply) error {
			d, _ := r.Status(refused)
			d.Fields(1)
			return d.Err()
		}, ErrUnexpectedReply, "odd number"},
		{"return redis.error_reply('ERR boom')", nil, nil, "boom"},
	}
	for _, c := range cases {
		s := fresh(prefix, c.lua)
		rep, err := r.Run(context.Background(), s, []string{prefix + ":k"})
		if err == nil && c.read != nil {
			err = c.read(rep)
		}
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) || !strings.Contains(err.Error(), c.text) ||
			!strings.Contains(err.Error(), "fresh") {
			t.Errorf("%s: error %v, want %v mentioning %q and the script", c.lua, err, c.want, c.text)
		}
		if errors.Is(err, redis.Nil) {
			t.Errorf("%s: redis.Nil escaped", c.lua)
		}
	}
	if err := (Decoder{}).Err(); !errors.Is(err, ErrUnexpectedReply) {
		t.Errorf("zero Decoder: %v, want ErrUnexpectedReply", err)
	}
}

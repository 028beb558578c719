package main

import (
	"strings"
	"testing"
)

func TestProfileKeyNamesScriptsByName(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"FCALL", "sluice_8a2e8c05c613_finish", "1", "k"}, "fcall finish"},
		{[]string{"fcall", "sluice_8a2e8c05c613_secrets_read", "1"}, "fcall secrets_read"},
		{[]string{"FCALL", "other_fn", "0"}, "fcall other_fn"},
		{[]string{"EVALSHA", "a8153319360adc71cdc370107f8ab9786f204765", "2"}, "evalsha a8153319"},
		{[]string{"HSET", "k", "f", "v"}, "hset"},
		{[]string{"PING"}, "ping"},
		{nil, "?"},
	} {
		if got := profileKey(c.args); got != c.want {
			t.Errorf("profileKey(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}

// TestProfileReportSeparatesScriptsFromCommands: the scripts' rows add up
// to their total (the commands inside them are listed apart, not added).
func TestProfileReportSeparatesScriptsFromCommands(t *testing.T) {
	p := &scriptProfile{
		calls: map[string]int64{"fcall finish": 10, "fcall claim": 20, "hset": 400, "zadd": 50},
		usec:  map[string]int64{"fcall finish": 3000, "fcall claim": 1000, "hset": 800, "zadd": 100},
	}
	got := p.report(100, 1)
	scripts, commands, ok := strings.Cut(got, "\n")
	if !ok {
		t.Fatalf("report %q: want a scripts line and a commands line", got)
	}
	if !strings.Contains(scripts, "40.0 µs/job together") || strings.Index(scripts, "finish") > strings.Index(scripts, "claim") {
		t.Errorf("scripts line %q: want 40.0 µs/job together, finish (30) before claim (10)", scripts)
	}
	if !strings.Contains(scripts, "fcall finish 0.10/job 30.0µs/job") || strings.Contains(scripts, "hset") {
		t.Errorf("scripts line %q: want finish at 0.10 calls and 30 µs per job, and no plain command", scripts)
	}
	if !strings.Contains(commands, "hset 4.00/job 8.0µs/job") || strings.Contains(commands, "zadd") {
		t.Errorf("commands line %q: want only the top command, hset", commands)
	}
}

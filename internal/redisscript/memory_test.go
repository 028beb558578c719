package redisscript

import "testing"

func TestParseMemoryInfo(t *testing.T) {
	t.Parallel()
	used, max, err := ParseMemoryInfo("# Memory\r\nused_memory:1234\r\nused_memory_human:1.21K\r\nmaxmemory:5678\r\nmaxmemory_human:5.54K\r\n")
	if err != nil || used != 1234 || max != 5678 {
		t.Errorf("parse: %d %d %v, want 1234 5678 nil", used, max, err)
	}
	for _, bad := range []string{"", "# Memory\r\nused_memory:12\r\n", "used_memory:x\r\nmaxmemory:1\r\n"} {
		if _, _, err := ParseMemoryInfo(bad); err == nil {
			t.Errorf("parse %q: no error", bad)
		}
	}
}

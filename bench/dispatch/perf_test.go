package main

import (
	"strings"
	"testing"
)

// TestComponentsSumsAPerfReport: the lines of a perf report of Redis's
// samples land in their parts — an address in the server's own object is
// Lua's VM (or an unexported function), a named one Redis's C (lookups and
// rehashing named among it), [k] the kernel, libc and the allocator by
// object (addresses included), the rest other — and the report's header
// and blank lines in none.
func TestComponentsSumsAPerfReport(t *testing.T) {
	report := `# To display the perf.data header info, please use --header/--header-only options.
#
# Samples: 11K of event 'cpu-clock'
#
# Overhead  Shared Object      Symbol
# ........  .................  ......
#
    40.00%  redis-check-rdb    [.] 0x000000000015ef95
     5.00%  redis-check-rdb    [.] 0x000000000015924a
     8.00%  redis-check-rdb    [.] dictFind
     4.00%  redis-check-rdb    [.] dictSdsKeyCompare
     2.50%  redis-check-rdb    [.] dictRehash
     6.00%  redis-server       [.] call
     9.00%  [kernel.kallsyms]  [k] tcp_ack
     7.00%  libc.so.6          [.] __memmove_avx512_unaligned_erms
     4.00%  libjemalloc.so.2   [.] 0x0000000000024e99
     3.00%  libjemalloc.so.2   [.] malloc
     1.00%  [vdso]             [.] __vdso_gettimeofday

#
# (Tip: use perf report -g)
`
	got, err := components(report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Lua's VM and unexported functions 45.0 %", "Redis's exported C 20.5 %",
		"hash-table lookups 12.0 %", "rehashing 2.5 %", "kernel 9.0 %", "libc 7.0 %", "allocator 7.0 %", "other 1.0 %"} {
		if !strings.Contains(got, want) {
			t.Errorf("components = %q, want %q in it", got, want)
		}
	}
	if _, err := components("# no samples\n"); err == nil {
		t.Error("components of a report without samples: no error")
	}
}

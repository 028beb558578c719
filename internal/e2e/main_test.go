package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// bin holds the paths of the binaries under test, built by TestMain.
var bin struct{ throttler, worker string }

func TestMain(m *testing.M) {
	if err := buildBinaries(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	redistest.Main(m)
}

// binDirPattern names the directories the binaries are built in: one per
// test process, named by its pid. redistest.Main ends the process with
// os.Exit, so a run cannot remove its own directory; the next run removes
// those whose process has ended.
const binDirPattern = "sluice-e2e-bin-"

// buildBinaries builds cmd/throttler and cmd/worker once for the whole run
// (the slow part of the suite), without the race detector: the tests measure
// timing at the receiver, and the processes' own races are the business of
// their packages' tests.
func buildBinaries() error {
	removeStaleBinDirs()
	dir := filepath.Join(os.TempDir(), binDirPattern+strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("binaries directory: %w", err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("find the go command to build the binaries: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", dir+string(filepath.Separator),
		"github.com/sluicehq/sluice/cmd/throttler", "github.com/sluicehq/sluice/cmd/worker")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build the binaries: %w\n%s", err, out)
	}
	bin.throttler, bin.worker = filepath.Join(dir, "throttler"), filepath.Join(dir, "worker")
	return nil
}

// removeStaleBinDirs removes the binary directories of test processes that
// have ended.
func removeStaleBinDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), binDirPattern+"*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), binDirPattern))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH { // no such process
			_ = os.RemoveAll(d)
		}
	}
}

package fleet

import (
	_ "embed"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// The scripts, every one of the package registered here. Each stands alone
// (redisscript.NewClocked: clock.lua, then the script; no lib.lua) on one
// plain key it gets in KEYS[1] (keys.go); each file opens with its
// KEYS/ARGV/reply contract.
var (
	//go:embed lua/workers.lua
	luaWorkers string
	//go:embed lua/task_workers.lua
	luaTaskWorkers string
)

var (
	scriptWorkers     = redisscript.NewClocked("workers", luaWorkers)
	scriptTaskWorkers = redisscript.NewClocked("task_workers", luaTaskWorkers)
)

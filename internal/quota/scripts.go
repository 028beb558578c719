package quota

import (
	_ "embed"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// The scripts, every one of the package registered here. Each stands alone
// (redisscript.NewClocked: clock.lua, then the script; no lib.lua) and
// touches only the keys of one upstream's slot {u:<name>}, which it gets in
// KEYS (keys.go); each file opens with its KEYS/ARGV/reply contract. They
// run by EVALSHA, never in the store's Functions library.
var (
	//go:embed lua/upstream_put.lua
	luaUpstreamPut string
	//go:embed lua/upstream_pause.lua
	luaUpstreamPause string
	//go:embed lua/upstream_delete.lua
	luaUpstreamDelete string
	//go:embed lua/upstream_grant.lua
	luaUpstreamGrant string
	//go:embed lua/upstream_adapt.lua
	luaUpstreamAdapt string
	//go:embed lua/upstream_charge.lua
	luaUpstreamCharge string
	//go:embed lua/upstream_run.lua
	luaUpstreamRun string
	//go:embed lua/upstream_quota.lua
	luaUpstreamQuota string
)

var (
	// The registry: an upstream's configuration, pause and removal.
	scriptUpstreamPut    = redisscript.NewClocked("upstream_put", luaUpstreamPut)
	scriptUpstreamPause  = redisscript.NewClocked("upstream_pause", luaUpstreamPause)
	scriptUpstreamDelete = redisscript.NewClocked("upstream_delete", luaUpstreamDelete)
	// The coordinator: segments of the upstream's calendar for the shards,
	// its adaptive rate and cost corrections of its calendar.
	scriptUpstreamGrant  = redisscript.NewClocked("upstream_grant", luaUpstreamGrant)
	scriptUpstreamAdapt  = redisscript.NewClocked("upstream_adapt", luaUpstreamAdapt)
	scriptUpstreamCharge = redisscript.NewClocked("upstream_charge", luaUpstreamCharge)
	// Pacing by the quota the upstream's answers report (issue #32).
	scriptUpstreamQuota = redisscript.NewClocked("upstream_quota", luaUpstreamQuota)
	// The concurrency leases of the jobs running under the upstream.
	scriptUpstreamRun = redisscript.NewClocked("upstream_run", luaUpstreamRun)
)

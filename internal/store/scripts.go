package store

import (
	"context"
	_ "embed"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// The scripts, every one of the package registered here. Each file opens
// with its KEYS/ARGV/reply contract; clock.lua (redisscript.Clock) is the
// clock of every script; lib.lua holds the shared prologue (key
// builders, policy merge, tenant state, reschedule), lifecycle.lua the job
// lifecycle helpers (head lane, attempt log, retry curve, dead letters,
// tenant cache). They are assembled once, at init: built-in defaults, clock,
// lib, lanes, recent, lifecycle, tenants, script. meta.lua stands alone.
// The upstream registry's and coordinator's scripts are internal/quota's,
// the worker registry's internal/fleet's: they use no lib.lua and live in
// their own hash slots.
var (
	//go:embed lua/lib.lua
	luaLib string
	//go:embed lua/lifecycle.lua
	luaLifecycle string
	//go:embed lua/lanes.lua
	luaLanes string
	//go:embed lua/recent.lua
	luaRecent string
	//go:embed lua/enqueue.lua
	luaEnqueue string
	//go:embed lua/cancel.lua
	luaCancel string
	//go:embed lua/pass.lua
	luaPass string
	//go:embed lua/claim.lua
	luaClaim string
	//go:embed lua/finish.lua
	luaFinish string
	//go:embed lua/admin.lua
	luaAdmin string
	//go:embed lua/replay.lua
	luaReplay string
	//go:embed lua/dead_letters.lua
	luaDeadLetters string
	//go:embed lua/tenant_jobs.lua
	luaTenantJobs string
	//go:embed lua/policy_put.lua
	luaPolicyPut string
	//go:embed lua/tenant_state.lua
	luaTenantState string
	//go:embed lua/secrets_write.lua
	luaSecretsWrite string
	//go:embed lua/secrets_read.lua
	luaSecretsRead string
	//go:embed lua/tenants.lua
	luaTenants string
	//go:embed lua/tenant_list.lua
	luaTenantList string
	//go:embed lua/dead_replay.lua
	luaDeadReplay string
	//go:embed lua/tenant_names.lua
	luaTenantNames string
	//go:embed lua/tenant_views.lua
	luaTenantViews string
	//go:embed lua/tenant_keys.lua
	luaTenantKeys string
	//go:embed lua/finished.lua
	luaFinished string
	//go:embed lua/tenant_backfill.lua
	luaTenantBackfill string
	//go:embed lua/callback_take.lua
	luaCallbackTake string
	//go:embed lua/callback_done.lua
	luaCallbackDone string
	//go:embed lua/upstream_orphans.lua
	luaUpstreamOrphans string
	//go:embed lua/upstream_waiting.lua
	luaUpstreamWaiting string
	//go:embed lua/observe.lua
	luaObserve string
	//go:embed lua/observe_rebuild.lua
	luaObserveRebuild string
	//go:embed lua/meta.lua
	luaMeta string
	//go:embed lua/circuit_wake.lua
	luaCircuitWake string
	//go:embed lua/plan_apply.lua
	luaPlanApply string
)

// script is one dispatch script built on lib.lua: its name (for error
// messages, and its function's in the Redis Functions library,
// functions.go), the assembled EVAL script and the body the library holds.
type script struct {
	name string
	eval *redisscript.Script
	body string
}

// libScripts are the scripts built on lib.lua, in the order they were
// assembled: the bodies of the Functions library. The order is part of the
// library's source, so of its version: append new scripts at the end.
var libScripts []*script

var (
	scriptEnqueue         = assemble("enqueue", luaEnqueue)
	scriptCancel          = assemble("cancel", luaCancel)
	scriptPass            = assemble("pass", luaPass)
	scriptClaim           = assemble("claim", luaClaim)
	scriptFinish          = assemble("finish", luaFinish)
	scriptAdmin           = assemble("admin", luaAdmin)
	scriptReplay          = assemble("replay", luaReplay)
	scriptDeadLetters     = assemble("dead_letters", luaDeadLetters)
	scriptPolicyPut       = assemble("policy_put", luaPolicyPut)
	scriptTenantState     = assemble("tenant_state", luaTenantState)
	scriptSecretsWrite    = assemble("secrets_write", luaSecretsWrite)
	scriptSecretsRead     = assemble("secrets_read", luaSecretsRead)
	scriptTenantList      = assemble("tenant_list", luaTenantList)
	scriptDeadReplay      = assemble("dead_replay", luaDeadReplay)
	scriptTenantNames     = assemble("tenant_names", luaTenantNames)
	scriptTenantViews     = assemble("tenant_views", luaTenantViews)
	scriptTenantKeys      = assemble("tenant_keys", luaTenantKeys)
	scriptFinished        = assemble("finished", luaFinished)
	scriptBackfill        = assemble("tenant_backfill", luaTenantBackfill)
	scriptCallbackTake    = assemble("callback_take", luaCallbackTake)
	scriptCallbackDone    = assemble("callback_done", luaCallbackDone)
	scriptUpstreamOrphans = assemble("upstream_orphans", luaUpstreamOrphans)
	scriptUpstreamWaiting = assemble("upstream_waiting", luaUpstreamWaiting)
	scriptTenantJobs      = assemble("tenant_jobs", luaTenantJobs)
	scriptCircuitWake     = assemble("circuit_wake", luaCircuitWake)
	scriptObserve         = assemble("observe", luaObserve)
	scriptObserveRebuild  = assemble("observe_rebuild", luaObserveRebuild)
	scriptPlanApply       = assemble("plan_apply", luaPlanApply)

	// scriptMeta stands alone, outside the library and without a clock: it
	// checks the deployment's fixed settings (meta.go) before a Store exists.
	scriptMeta = redisscript.New("meta", luaMeta)
)

// prologue is what every script built on lib.lua shares: the built-in
// defaults, clock.lua, lib.lua, lanes.lua, recent.lua, lifecycle.lua and tenants.lua.
func prologue() string {
	return "local BUILTIN = " + DefaultParams().luaTable() + "\n" + redisscript.Clock + "\n" + luaLib + "\n" + luaLanes + "\n" + luaRecent + "\n" + luaLifecycle + "\n" + luaTenants + "\n"
}

// assemble builds the EVAL form of a script on lib.lua — KEYS and ARGV as
// locals, the prologue, begin(), the body — and adds the body to the
// Functions library (functions.go).
func assemble(name, body string) *script {
	src := "local KEYS, ARGV = KEYS, ARGV\n" + prologue() +
		"do local err = begin() if err then return err end end\n" + body
	sc := &script{name: name, eval: redisscript.New(name, src), body: body}
	libScripts = append(libScripts, sc)
	return sc
}

// Status codes in the first element of every script reply (lib.lua).
const (
	statusOK              = redisscript.StatusOK
	statusNotFound        = redisscript.StatusNotFound
	statusVersionMismatch = redisscript.StatusVersionMismatch
)

// run executes sc on shard with the conventional arguments (KEYS[1] = the
// shard's ready set, ARGV[1] = the shard base, ARGV[2] = now µs or 0) and
// returns a decoder over the reply. A reply whose status is not "ok" is also
// returned as a *redisscript.Refusal error, which callers turn into their typed error.
func (s *Store) run(ctx context.Context, sc *script, shard int, args ...any) (decoder, error) {
	return s.runKeys(ctx, sc, []string{s.keys.ready(shard)}, s.argv(shard, args...)...)
}

// argv is the conventional ARGV of a shard script: the shard base, now, args.
func (s *Store) argv(shard int, args ...any) []any {
	argv := make([]any, 0, 2+len(args))
	argv = append(argv, s.keys.base(shard), s.nowArg())
	return append(argv, args...)
}

// runKeys executes sc with keys and argv as they are and decodes the reply
// as run does.
func (s *Store) runKeys(ctx context.Context, sc *script, keys []string, argv ...any) (decoder, error) {
	r, err := s.call(ctx, sc, keys, argv)
	if err != nil {
		return decoder{}, err
	}
	d, err := r.Status(redisscript.Refused)
	return decoder{d}, err
}

// nowArg is ARGV[2]: the injected clock in µs, or "0" for Redis TIME.
func (s *Store) nowArg() string { return redisscript.NowArg(s.clock) }

// decoder reads a script reply with checked assertions
// (redisscript.Decoder: a sticky first mismatch, wrapping ErrProtocol;
// check Err once after reading).
type decoder struct{ redisscript.Decoder }

func (d decoder) fail(format string, args ...any) { d.Fail(format, args...) }
func (d decoder) int(i int) int64                 { return d.Int(i) }
func (d decoder) str(i int) string                { return d.Str(i) }

// list is a decoder over the array at i, sharing d's error.
func (d decoder) list(i int) decoder { return decoder{d.List(i)} }

// fields reads the elements from index from on as field/value pairs (an
// HGETALL).
func (d decoder) fields(from int) map[string]string { return d.Fields(from) }

// scriptCircuit stands alone too (redisscript.NewClocked, no lib.lua): the
// destinations' circuits live in <p>:{circuits}:c and its waiters' sets,
// one slot (circuit.go).
//
//go:embed lua/circuit.lua
var luaCircuit string

var scriptCircuit = redisscript.NewClocked("circuit", luaCircuit)

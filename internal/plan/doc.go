// Package plan is the dispatcher pass's decisions in Go: the tenant's
// packed state and the rules that decide on it (twins of lib.lua's), the
// release of a pass by weighted virtual time with its claim spacing, the
// pre-claim, and what each touched tenant then stores (pass.lua 3, 3d, 3e
// and 4, for the tenants Supported says it decides for).
//
// It moves the pass's decisions out of Redis (docs/design.md "Where the
// decisions run"), where the Lua around the commands costs most of a
// job's time: internal/store plans a pass with it when the deployment's
// dispatch.planner is go (store.Config.Planner), reading with plain
// commands and writing with plan_apply.lua. internal/store's differential
// tests run it beside the Lua on a real Redis and require the same values
// and the same bytes: plan_diff_test.go every rule on random states and
// policies, plan_pass_test.go whole passes along random walks of
// enqueues, passes, claims, finishes, retries and pauses, and
// plan_apply_test.go the whole Redis state of a store planning in Go
// beside one deciding in pass.lua.
//
// Invariants:
//   - Every value is a float64, as every Lua number is: a tenant's state
//     holds µs near 1.8·10¹⁵, integers exact in doubles, and each rule
//     computes what the Lua computes, operation for operation, so the
//     results are equal bit for bit. A product added to another value is
//     converted (float64(x*y) + z) so that the compiler never fuses it into
//     one rounding (the spec allows a fused multiply-add otherwise), and
//     constants that Lua computes at run time (1 − PaceMargin) are computed
//     at run time here too.
//   - The field order of the packed state is lib.lua's T_FIELDS
//     (FieldNames); Encode leaves out trailing zero fields as pack_tenant
//     does, and Decode reads a shorter state's missing fields as 0.
//   - Order (the pass's visit order by virtual time) compares tenant names
//     byte by byte. Lua compares strings with strcoll, which is the same
//     under the C locale Redis runs with by default; under another
//     LC_COLLATE the tie-break of equal (vt, score) may differ, which
//     changes which of two equal tenants goes first, not fairness.
package plan

package store

// AdmittedSince is the tokens admitted to the tenant between prev (an
// earlier TenantState of the same tenant) and st, from the inflow counters
// (tenant fields in_m, in_c, in_p: the tokens admitted in the minute of the
// last admission and in the minute before). Exact when the two states are
// at most a minute of admissions apart; when more whole minutes passed, the
// minutes between are not held anymore and only the last two are counted
// (a lower bound). 0 when the counters went back (the idle tenant's hash
// expired in between: admissions since then are counted from zero).
func (st TenantState) AdmittedSince(prev TenantState) int64 {
	a, b := prev.inflow, st.inflow
	var n int64
	switch {
	case b.minute == a.minute:
		n = b.current - a.current
	case b.minute == a.minute+1:
		n = b.current + b.previous - a.current
	case b.minute > a.minute:
		n = b.current + b.previous
	}
	return max(n, 0)
}

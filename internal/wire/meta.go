package wire

import (
	"strconv"
	"time"
)

// Meta is a deployment's fixed parameters, kept in the hash MetaKey(prefix)
// (DESIGN §3): written by the first process that starts, compared by every
// later one. Changing any of them is an offline operation (job ids carry
// their shard; released jobs carry slots computed with D and L).
type Meta struct {
	Prefix  string
	Shards  int
	Lead    time.Duration // D
	MinLead time.Duration // L
}

// The fixed parts of the meta hash.
const (
	MetaHash   = "crc32-ieee" // shard = crc32-IEEE(tenant) mod shards
	MetaSchema = 1            // the key layout's version
)

// MetaKey is the key of the meta hash under prefix: "<prefix>:meta".
func MetaKey(prefix string) string { return prefix + ":meta" }

// Fields is m as the meta hash stores it, field name then value:
// prefix, shards, hash, schema, lead_us, min_lead_us.
func (m Meta) Fields() []string {
	return []string{
		"prefix", m.Prefix,
		"shards", strconv.Itoa(m.Shards),
		"hash", MetaHash,
		"schema", strconv.Itoa(MetaSchema),
		"lead_us", strconv.FormatInt(m.Lead.Microseconds(), 10),
		"min_lead_us", strconv.FormatInt(m.MinLead.Microseconds(), 10),
	}
}

package sluicetask

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// deployment is what the middleware needs of <prefix>:meta's fixed part.
type deployment struct {
	shards  int
	minLead time.Duration // L
}

// readDeployment reads <prefix>:meta with store.ReadMeta (the hash and
// schema must be the ones this build knows). Without the hash (no Sluice
// process has started on prefix yet) Sluice's defaults apply, with a
// warning: the adjustable settings are followed once a throttler writes
// them, the fixed ones only on the next Start.
func readDeployment(ctx context.Context, rdb redis.UniversalClient, prefix string, log *slog.Logger) (deployment, error) {
	m, found, err := store.ReadMeta(ctx, rdb, prefix)
	if err != nil {
		return deployment{}, err
	}
	if !found {
		log.Warn("no Sluice deployment in Redis yet: using the default shards and dispatch.min_lead until the next Start "+
			"(settings are followed once a throttler has started)", "key", wire.MetaKey(prefix),
			"shards", store.ShardsDefault, "min_lead", store.MinLeadDefault)
		return deployment{shards: store.ShardsDefault, minLead: store.MinLeadDefault}, nil
	}
	return deployment{shards: m.Shards, minLead: m.MinLead}, nil
}

package sluicetask

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// deployment is what the middleware needs of <prefix>:meta.
type deployment struct {
	shards  int
	minLead time.Duration // L
}

// readDeployment reads <prefix>:meta and reconciles it with s: a stored
// value wins over a zero setting, and differs from a non-zero one only with
// an error naming every difference. Without the hash (no Sluice process has
// started yet) the settings or Sluice's defaults apply. The hash and schema
// must be the ones this build knows.
func readDeployment(ctx context.Context, rdb redis.UniversalClient, prefix string, s Settings) (deployment, error) {
	d := deployment{shards: s.Shards, minLead: s.MinLead}
	stored, err := rdb.HGetAll(ctx, wire.MetaKey(prefix)).Result()
	if err != nil {
		return deployment{}, fmt.Errorf("read %s: %w", wire.MetaKey(prefix), err)
	}
	if len(stored) > 0 {
		var diffs []string
		if stored["hash"] != wire.MetaHash || stored["schema"] != strconv.Itoa(wire.MetaSchema) {
			diffs = append(diffs, fmt.Sprintf("hash %q schema %q: this build knows %q schema %d",
				stored["hash"], stored["schema"], wire.MetaHash, wire.MetaSchema))
		}
		shards, errShards := strconv.Atoi(stored["shards"])
		minLeadUS, errLead := strconv.ParseInt(stored["min_lead_us"], 10, 64)
		if errShards != nil || errLead != nil || shards < 1 || minLeadUS < 1 {
			return deployment{}, fmt.Errorf("read %s: shards %q, min_lead_us %q: want positive integers",
				wire.MetaKey(prefix), stored["shards"], stored["min_lead_us"])
		}
		minLead := time.Duration(minLeadUS) * time.Microsecond
		if d.shards != 0 && d.shards != shards {
			diffs = append(diffs, fmt.Sprintf("shards: stored %d, configured %d", shards, d.shards))
		}
		if d.minLead != 0 && d.minLead != minLead {
			diffs = append(diffs, fmt.Sprintf("min_lead: stored %s, configured %s", minLead, d.minLead))
		}
		if len(diffs) > 0 {
			return deployment{}, fmt.Errorf("%s: %w: %s — leave Settings.Shards and Settings.MinLead zero to take the stored values",
				wire.MetaKey(prefix), errMetaMismatch, strings.Join(diffs, "; "))
		}
		d.shards, d.minLead = shards, minLead
	}
	if d.shards == 0 {
		d.shards = store.ShardsDefault
	}
	if d.minLead == 0 {
		d.minLead = store.MinLeadDefault
	}
	return d, nil
}

var errMetaMismatch = errors.New("settings differ from Sluice's deployment")

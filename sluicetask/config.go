package sluicetask

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/fleet"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/worker"
)

// Defaults of Config.
const (
	// PrefixDefault is Sluice's default key prefix (redis.prefix).
	PrefixDefault = store.PrefixDefault
	// AsynqTaskCheckIntervalDefault is asynq's own default TaskCheckInterval,
	// which a zero Config.TaskCheckInterval stands for, as a zero
	// asynq.Config.TaskCheckInterval does. It is too slow for Sluice's
	// default pickup budget: set both to about 20ms.
	AsynqTaskCheckIntervalDefault = time.Second
	// HeartbeatIntervalDefault is how often the heartbeats are renewed.
	HeartbeatIntervalDefault = worker.HeartbeatIntervalDefault
)

// Config configures a Middleware. Redis and Queues are required; every other
// zero field takes its default. Sluice's deployment-wide settings (shards,
// dispatch timing, retention, throttle) are not configured here: Start reads
// them from <prefix>:meta, and the middleware follows changes the throttler
// writes there.
type Config struct {
	// Redis is Sluice's Redis, which is also the asynq server's: the
	// dispatcher hands task jobs to asynq there. Required.
	Redis redis.UniversalClient
	// Prefix is Sluice's key prefix (redis.prefix); default PrefixDefault.
	Prefix string
	// Queues are the asynq queues this server takes Sluice task jobs from,
	// each one of Sluice's task_queues; 1–256 bytes, no braces, no
	// duplicates. Required. Each is heartbeated as <prefix>:mw:<queue>.
	Queues []string
	// Concurrency is the asynq server's Concurrency: how many task jobs it
	// holds at once, waiting for their slot or running. Zero means asynq's
	// default, runtime.NumCPU().
	Concurrency int
	// TaskCheckInterval is the asynq server's TaskCheckInterval; zero means
	// asynq's default, AsynqTaskCheckIntervalDefault. Start checks
	// dispatch.min_lead ≥ 1.5 × TaskCheckInterval + 2 × Redis RTT.
	TaskCheckInterval time.Duration
	// ID names this instance in the heartbeats; 1–200 bytes. Default
	// "<hostname>-<pid>-<random>".
	ID string
	// HeartbeatInterval is how often the heartbeats are renewed; each lives
	// three intervals. Default HeartbeatIntervalDefault.
	HeartbeatInterval time.Duration
	// Registerer receives the metrics (the sluice_worker_* series of
	// Sluice's workers); nil registers nothing.
	Registerer prometheus.Registerer
	// Logger receives errors (job ids, never payloads); nil discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.Prefix = cmp.Or(c.Prefix, PrefixDefault)
	c.Queues = slices.Clone(c.Queues)
	c.Concurrency = cmp.Or(c.Concurrency, runtime.NumCPU())
	c.TaskCheckInterval = cmp.Or(c.TaskCheckInterval, AsynqTaskCheckIntervalDefault)
	if c.ID == "" {
		c.ID = defaultID()
	}
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, HeartbeatIntervalDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Redis == nil {
		errs = append(errs, errors.New("Redis is required"))
	}
	if len(c.Queues) == 0 {
		errs = append(errs, errors.New("Queues: name at least one asynq queue of Sluice's task_queues"))
	}
	for i, q := range c.Queues {
		if q == "" || len(q) > fleet.MaxTaskQueueLen || strings.ContainsAny(q, "{}") {
			errs = append(errs, fmt.Errorf("Queues[%d] %q: want 1–%d bytes without braces", i, q, fleet.MaxTaskQueueLen))
		}
		if j := slices.Index(c.Queues, q); j < i {
			errs = append(errs, fmt.Errorf("Queues[%d] %q: duplicate of Queues[%d]", i, q, j))
		}
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("Concurrency %d: want ≥ 1", c.Concurrency))
	}
	if len(c.ID) > 200 {
		errs = append(errs, fmt.Errorf("ID: %d bytes, want at most 200", len(c.ID)))
	}
	if c.TaskCheckInterval < 0 || c.HeartbeatInterval < 0 {
		errs = append(errs, fmt.Errorf("TaskCheckInterval %s, HeartbeatInterval %s: want ≥ 0", c.TaskCheckInterval, c.HeartbeatInterval))
	}
	return errors.Join(errs...)
}

func defaultID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", cmp.Or(host, "sluicetask"), os.Getpid(), hex.EncodeToString(b[:]))
}

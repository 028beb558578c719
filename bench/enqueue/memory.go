package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// memTenants is how many tenants the memory cell's jobs are spread over: few,
// so per-tenant keys are a negligible share of the total.
const memTenants = 10

// memResult is Redis memory spent on queued jobs.
type memResult struct {
	jobs                int
	used, dataset       int64 // growth of used_memory and used_memory_dataset
	jobHash             int64 // MEMORY USAGE of one job hash
	list, listLen       int64 // MEMORY USAGE and LLEN of the backlog lists
	sentBytes, canonLen int   // one job as sent, and as stored (canonical JSON)
	sampleID            string
	err                 error // why the measurement failed, if it did
}

// measureMemory enqueues e.o.memJobs jobs through the batch route and
// measures what Redis spends on them.
func measureMemory(ctx context.Context, e *env) (memResult, error) {
	r := memResult{jobs: e.o.memJobs, sentBytes: len(e.one), canonLen: len(e.items[0].Body)}
	used0, data0, err := settledMemory(ctx, e)
	if err != nil {
		return r, err
	}
	tenants := tenantNames("mem", memTenants)
	ids, err := enqueueForMemory(ctx, e, tenants)
	if err != nil {
		return r, err
	}
	used1, data1, err := settledMemory(ctx, e)
	if err != nil {
		return r, err
	}
	r.used, r.dataset, r.sampleID = used1-used0, data1-data0, ids[0]
	jobKey, err := e.st.JobKey(ids[0])
	if err != nil {
		return r, err
	}
	if r.jobHash, err = memoryUsage(ctx, e, jobKey); err != nil {
		return r, err
	}
	for _, t := range tenants {
		key := e.st.BacklogKey(t)
		n, err := memoryUsage(ctx, e, key)
		if err != nil {
			return r, err
		}
		l, err := e.rdb.LLen(ctx, key).Result()
		if err != nil {
			return r, err
		}
		r.list += n
		r.listLen += l
	}
	return r, nil
}

// memoryUsage is MEMORY USAGE key SAMPLES 0 (every element counted).
func memoryUsage(ctx context.Context, e *env, key string) (int64, error) {
	n, err := e.rdb.MemoryUsage(ctx, key, 0).Result()
	if errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("memory usage %s: no such key", key)
	}
	if err != nil {
		return 0, fmt.Errorf("memory usage %s: %w", key, err)
	}
	return n, nil
}

// enqueueForMemory sends e.o.memJobs jobs as batches, one producer per
// tenant, and returns some of the job ids. Every job must be accepted.
func enqueueForMemory(ctx context.Context, e *env, tenants []string) ([]string, error) {
	perTenant := e.o.memJobs / e.o.batch / len(tenants)
	extra := e.o.memJobs/e.o.batch - perTenant*len(tenants)
	var (
		mu   sync.Mutex
		ids  []string
		errs []error
		wg   sync.WaitGroup
	)
	for i, t := range tenants {
		n := perTenant
		if i < extra {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				id, err := postBatchForIDs(ctx, e, t)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					ids = append(ids, id)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, fmt.Errorf("%d of %d tenants failed, the first: %w", len(errs), len(tenants), errs[0])
	}
	return ids, nil
}

// postBatchForIDs sends one batch to tenant, checks every item was accepted
// and returns the first item's id.
func postBatchForIDs(ctx context.Context, e *env, tenant string) (string, error) {
	status, reply, err := e.send(ctx, "/v1/tenants/"+tenant+"/jobs:batch", e.batch)
	if err != nil {
		return "", err
	}
	if status != http.StatusAccepted {
		return "", fmt.Errorf("memory batch for %s: %d %s", tenant, status, snippet(reply))
	}
	acc, _, err := countBatch(reply, e.o.batch)
	if err != nil {
		return "", err
	}
	if acc != e.o.batch {
		return "", fmt.Errorf("memory batch for %s: %d of %d accepted: %s", tenant, acc, e.o.batch, snippet(reply))
	}
	return firstID(reply)
}

// firstID returns the id of the first result of a batch reply.
func firstID(reply []byte) (string, error) {
	var br batchReply
	if err := json.Unmarshal(reply, &br); err != nil || len(br.Results) == 0 || br.Results[0].ID == "" {
		return "", fmt.Errorf("no job id in batch reply: %s", snippet(reply))
	}
	return br.Results[0].ID, nil
}

// settledMemory returns used_memory and used_memory_dataset once used_memory
// has stopped moving (client query buffers of the last requests are freed by
// Redis's cron), polling for at most 3 s.
func settledMemory(ctx context.Context, e *env) (used, dataset int64, err error) {
	deadline := time.Now().Add(3 * time.Second)
	prev, stable := int64(-1), 0
	for {
		used, dataset, err = memoryInfo(ctx, e)
		if err != nil {
			return 0, 0, err
		}
		if used == prev {
			stable++
		} else {
			stable = 0
		}
		if stable >= 2 || time.Now().After(deadline) {
			return used, dataset, nil
		}
		prev = used
		time.Sleep(200 * time.Millisecond)
	}
}

func memoryInfo(ctx context.Context, e *env) (used, dataset int64, err error) {
	info, err := e.rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("info memory: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "used_memory":
			used, err = strconv.ParseInt(v, 10, 64)
		case "used_memory_dataset":
			dataset, err = strconv.ParseInt(v, 10, 64)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("info memory %s: %w", k, err)
		}
	}
	return used, dataset, nil
}

package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sluicehq/sluice/internal/store"
)

// cell is one measured subject. do makes one request for tenant.
type cell struct {
	name    string
	jobs    int  // jobs per request (0: not an enqueue)
	ceiling bool // the EVALSHA reference the ratios divide by
	tenants []string
	do      func(ctx context.Context, tenant string) outcome
}

// outcome is the result of one request.
type outcome struct {
	accepted int   // jobs stored
	refused  int   // jobs refused by admission or a backlog cap
	limited  bool  // the request itself was answered 429
	err      error // anything else: transport error, unexpected status or reply
}

func (e *env) cells() []cell {
	n := e.o.batch
	return []cell{{
		name:    "HTTP POST …/jobs, 1 job",
		jobs:    1,
		tenants: tenantNames("one", e.o.tenants),
		do: func(ctx context.Context, t string) outcome {
			return e.post(ctx, "/v1/tenants/"+t+"/jobs", e.one, 0)
		},
	}, {
		name:    fmt.Sprintf("HTTP POST …/jobs:batch, %d jobs", n),
		jobs:    n,
		tenants: tenantNames("batch", e.o.tenants),
		do: func(ctx context.Context, t string) outcome {
			return e.post(ctx, "/v1/tenants/"+t+"/jobs:batch", e.batch, n)
		},
	}, {
		name:    "Store.Enqueue, 1 job, no HTTP",
		jobs:    1,
		tenants: tenantNames("direct-one", e.o.tenants),
		do: func(ctx context.Context, t string) outcome {
			return e.direct(ctx, t, e.items[:1])
		},
	}, {
		name:    fmt.Sprintf("Store.Enqueue, %d jobs, no HTTP", n),
		jobs:    n,
		tenants: tenantNames("direct-batch", e.o.tenants),
		do: func(ctx context.Context, t string) outcome {
			return e.direct(ctx, t, e.items)
		},
	}, {
		name:    "go-redis EVALSHA return 1",
		ceiling: true,
		tenants: []string{""},
		do: func(ctx context.Context, _ string) outcome {
			return outcome{err: e.rdb.EvalSha(ctx, e.evalsh, nil).Err()}
		},
	}}
}

// post sends body to path and classifies the answer; n is the jobs in a
// batch body, 0 for a single job.
func (e *env) post(ctx context.Context, path string, body []byte, n int) outcome {
	status, reply, err := e.send(ctx, path, body)
	switch {
	case err != nil:
		return outcome{err: err}
	case status == http.StatusTooManyRequests:
		return outcome{refused: max(n, 1), limited: true}
	case status != http.StatusAccepted:
		return outcome{err: fmt.Errorf("%s: %d %s", path, status, snippet(reply))}
	case n == 0:
		return outcome{accepted: 1}
	}
	acc, ref, err := countBatch(reply, n)
	return outcome{accepted: acc, refused: ref, err: err}
}

// send POSTs body to path with the API key and returns the status and the
// whole reply (read to the end, which keeps the connection alive).
func (e *env) send(ctx context.Context, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.o.api+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+e.o.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(resp.Body)
	return resp.StatusCode, reply, err
}

// batchReply is the part of a batch answer this program reads (docs/design.md §6):
// one result per item, in order; an accepted item has status 202 and an id.
type batchReply struct {
	Results []struct {
		Status int    `json:"status"`
		ID     string `json:"id"`
		Error  *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	} `json:"results"`
}

// countBatch counts accepted and refused (429) items in a 202 batch reply;
// any other item result is an error.
func countBatch(reply []byte, n int) (accepted, refused int, err error) {
	var br batchReply
	if err := json.Unmarshal(reply, &br); err != nil {
		return 0, 0, fmt.Errorf("batch reply: %w: %s", err, snippet(reply))
	}
	if len(br.Results) != n {
		return 0, 0, fmt.Errorf("batch reply with %d results for %d jobs: %s", len(br.Results), n, snippet(reply))
	}
	for _, r := range br.Results {
		switch {
		case r.Status == http.StatusAccepted && r.ID != "":
			accepted++
		case r.Status == http.StatusTooManyRequests:
			refused++
		case r.Error != nil:
			err = cmp.Or(err, fmt.Errorf("batch item: %d %s: %s", r.Status, r.Error.Code, r.Error.Message))
		default:
			err = cmp.Or(err, fmt.Errorf("batch item: status %d without id or error", r.Status))
		}
	}
	return accepted, refused, err
}

// direct runs the enqueue script through the dispatch store, as the API
// does after parsing, so the difference to the HTTP rows is the HTTP layer.
func (e *env) direct(ctx context.Context, tenant string, items []store.Item) outcome {
	res, err := e.st.Enqueue(ctx, tenant, items)
	if err != nil {
		return outcome{err: err}
	}
	var o outcome
	for _, r := range res {
		switch {
		case r.Outcome == store.Accepted:
			o.accepted++
		case r.Code == store.CodeRateLimited || r.Code == store.CodeBacklogFull:
			o.refused++
		default:
			o.err = errors.Join(o.err, fmt.Errorf("item refused: %s %s", r.Code, r.Detail))
		}
	}
	o.limited = o.refused == len(items)
	return o
}

func snippet(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

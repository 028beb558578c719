package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/store"
)

// ReplicationRetryAfter is the Retry-After, in seconds, of a 503
// replication_timeout.
const ReplicationRetryAfter = 1

// notReplicated is the 503 replication_timeout for the jobs ids (in
// order) whose write err (a *store.NotReplicatedError) reports short of
// replicas; op names the route in the metric. retryWith says how to retry.
func (s *Server) notReplicated(op string, err error, ids []string, retryWith string) *Error {
	s.metrics.ReplicationTimeouts.WithLabelValues(op).Inc()
	var nr *store.NotReplicatedError
	errors.As(err, &nr)
	what := "job " + strings.Join(ids, ", ")
	if len(ids) > 1 {
		what = "jobs " + strings.Join(ids, ", ")
	}
	e := errorf(http.StatusServiceUnavailable, CodeReplicationTimeout,
		"possibly stored: %s stored on the Redis primary but confirmed by %d of %d replicas within %s (a failover now could lose it); %s",
		what, nr.Got, nr.Want, nr.Timeout, retryWith)
	e.RetryAfter = ReplicationRetryAfter
	if len(ids) == 1 {
		e.JobID = ids[0]
	}
	return e
}

// retryEnqueue is how to retry an enqueue whose replication timed out.
func retryEnqueue(key string) string {
	if key == "" {
		return "it carried no " + HeaderIdempotencyKey + ", so a retry would store a second job: check it with GET /v1/jobs/{id}"
	}
	return "retry with the same " + HeaderIdempotencyKey + ": it answers 202 with this job once the replicas confirm it"
}

// retryBatch is how to retry a batch whose replication timed out.
const retryBatch = "retry the items with the same idempotency_key: each answers 202 with its job once the replicas confirm it"

// batchNotReplicated turns the results of a batch whose replication timed
// out into its answer: every stored or replayed item becomes a 503
// replication_timeout result that keeps its job reference; the status is
// 503 with the first such error.
func (s *Server) batchNotReplicated(err error, results []batchResult) (int, any, error) {
	var ids []string
	for _, br := range results {
		if br.Error == nil && br.jobRef != nil {
			ids = append(ids, br.ID)
		}
	}
	e := s.notReplicated("enqueue_batch", err, ids, retryBatch)
	for i, br := range results {
		if br.Error == nil && br.jobRef != nil {
			results[i].Status = e.Status
			results[i].Error = &errorDetail{Code: e.Code, Message: fmt.Sprintf("possibly stored: job %s is not yet confirmed by the replicas; %s", br.ID, retryBatch)}
		}
	}
	return e.Status, batchResponse{Error: &errorDetail{Code: e.Code, Message: e.Message}, Results: results}, nil
}

package store_test

import (
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/worker"
)

// A Coalescer serves as a worker's store.
var _ worker.Store = (*store.Coalescer)(nil)

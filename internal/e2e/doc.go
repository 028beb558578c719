// Package e2e holds no code: its tests run the real binaries (cmd/throttler
// and cmd/worker, built once per test run) as subprocesses against the test
// Redis, deliver webhooks to a loopback receiver, and kill, stop and restart
// the processes to check docs/design.md §5's guarantees where a user would see them:
// at the receiving endpoint.
//
//   - kill -9 of a worker or a dispatcher loses nothing, and duplicates are
//     only the attempts that were in flight on a killed worker;
//   - SIGTERM drains and exits 0, and a restart picks up the rest;
//   - several dispatchers and workers at once keep every tenant's rate;
//   - /readyz follows Redis going away and coming back;
//   - finished work leaves no keys behind once its retention has passed.
//
// Each test has its own key prefix (redistest.Prefix), so they share one
// Redis and run in parallel, except the one that measures rates.
package e2e

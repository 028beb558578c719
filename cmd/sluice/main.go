// Command sluice operates a Sluice throttler from a terminal or a script,
// through its HTTP API (package github.com/sluicehq/sluice/client): enqueue
// and inspect jobs, list and steer tenants, replay dead letters, manage
// webhook secrets and upstreams, check limits.
//
//	sluice [--url URL] [--key KEY] [--json] <command> <subcommand> [flags] [args]
//
// The throttler's URL and API key come from --url and --key, or
// $SLUICE_URL and $SLUICE_API_KEY (default URL http://127.0.0.1:8080).
// Output is an aligned table for people; --json prints the API's own JSON
// answer instead. Exit codes: 0 done, 1 error, 2 usage, 3 refused
// (rate limited, backlog full, or a limit check denied: back off and try
// again). `sluice help` lists the commands; --help on any shows its flags
// and an example. docs/cli.md has them all.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes.
const (
	exitOK      = 0
	exitError   = 1
	exitUsage   = 2
	exitRefused = 3 // rate limited, backlog full, a check denied: back off
)

// Environment variables.
const (
	envURL = "SLUICE_URL"
	envKey = "SLUICE_API_KEY"
)

// urlDefault is the throttler's URL without --url or $SLUICE_URL.
const urlDefault = "http://127.0.0.1:8080"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError is a command line that does not parse: exit 2, with usage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// errRefused is a denial that is not an error (a limit check): exit 3.
var errRefused = errors.New("refused")

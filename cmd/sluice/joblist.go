package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"github.com/sluicehq/sluice/client"
)

// jobsLs is `sluice jobs ls TENANT`: a page of the tenant's jobs in one state.
func jobsLs(fs *flag.FlagSet) runner {
	state := fs.String("state", "queued", "queued, delayed, running or dead")
	newest := fs.Bool("newest", false, "newest first (default: the next to leave first)")
	limit := fs.Int("limit", 50, "jobs a page (1 to 500)")
	cursor := fs.String("cursor", "", "the page after this cursor (printed under a page that has more)")
	return func(ctx context.Context, e *env, args []string) error {
		page, err := e.c.TenantJobs(ctx, args[0], client.JobsQuery{State: *state, Newest: *newest, Cursor: *cursor, Limit: *limit})
		if err != nil {
			return err
		}
		if e.json {
			return rawJSON(e.stdout, page.Raw)
		}
		rows := make([][]string, 0, len(page.Jobs))
		for _, j := range page.Jobs {
			rows = append(rows, []string{j.ID, j.Type, j.State, orDash(j.Created), orDash(j.ETA), itoa(j.AttemptCount)})
		}
		if err := table(e.stdout, []string{"ID", "TYPE", "STATE", "CREATED", "ETA", "ATTEMPTS"}, rows); err != nil {
			return err
		}
		if page.Cursor != "" {
			fmt.Fprintf(e.stdout, "more: --cursor %s\n", page.Cursor)
		}
		return nil
	}
}

// jobsCancelMany is `sluice jobs cancel-many TENANT`: bulk cancel.
func jobsCancelMany(fs *flag.FlagSet) runner {
	state := fs.String("state", "", "queued or delayed (default both)")
	event := fs.String("event", "", "only webhook jobs of this event")
	before := fs.String("before", "", "only jobs enqueued before this RFC 3339 time")
	limit := fs.Int("limit", 0, "list at most this many jobs a request (default 100)")
	all := fs.Bool("all", false, "go on until every selected job is canceled")
	return func(ctx context.Context, e *env, args []string) error {
		sel := client.JobsCancel{State: *state, Event: *event, Limit: *limit}
		var err error
		if sel.Before, err = parseBefore(*before); err != nil {
			return err
		}
		return bulk(e, "canceled", "more may remain: run again with --all", *all, func(cursor string) (int, string, json.RawMessage, error) {
			sel.Cursor = cursor
			res, err := e.c.CancelJobs(ctx, args[0], sel)
			if err != nil {
				return 0, "", nil, err
			}
			return res.Canceled, res.Cursor, res.Raw, nil
		})
	}
}

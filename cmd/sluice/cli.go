package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/client"
)

// command is one leaf command: "tenants ls".
type command struct {
	group, name string
	args        string // positional arguments, for the usage line
	nargs       [2]int // the least and most positional arguments
	summary     string
	example     string
	// flags defines the command's flags on fs and returns what runs it.
	flags func(fs *flag.FlagSet) runner
}

// path is the command's name as typed: "sluice tenants ls".
func (c *command) path() string { return strings.TrimSpace("sluice " + c.group + " " + c.name) }

// runner runs a parsed command with its positional arguments.
type runner func(ctx context.Context, e *env, args []string) error

// env is what a command runs with.
type env struct {
	c      *client.Client
	json   bool
	stdin  io.Reader
	stdout io.Writer
}

// globals are the flags every command takes.
type globals struct {
	url, key string
	json     bool
	timeout  time.Duration
}

func (g *globals) define(fs *flag.FlagSet) {
	fs.StringVar(&g.url, "url", "", "the throttler's base URL (default $"+envURL+", else "+urlDefault+")")
	fs.StringVar(&g.key, "key", "", "the API key (default $"+envKey+")")
	fs.BoolVar(&g.json, "json", false, "print the API's JSON answer instead of a table")
	fs.DurationVar(&g.timeout, "timeout", 30*time.Second, "give up after this long, retries included")
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// run is the whole program: it returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		writeOverview(stdout, "")
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	var g globals
	lead := flag.NewFlagSet("sluice", flag.ContinueOnError)
	lead.SetOutput(io.Discard)
	g.define(lead)
	if err := lead.Parse(args); err != nil { // flags before the command
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		return exitUsage
	}
	args = lead.Args()
	cmd, rest, err := find(args)
	if err != nil {
		fmt.Fprintf(stderr, "sluice: %v\n\n", err)
		writeOverview(stderr, groupOf(args))
		return exitUsage
	}
	if cmd == nil { // a group alone, or with --help
		writeOverview(stdout, args[0])
		if len(rest) > 0 && isHelp(rest[0]) {
			return exitOK
		}
		return exitUsage
	}
	fs := flag.NewFlagSet(cmd.path(), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	g.define(fs)
	lead.Visit(func(f *flag.Flag) { _ = fs.Set(f.Name, f.Value.String()) })
	runCmd := cmd.flags(fs)
	pos, err := parseInterleaved(fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		writeUsage(stdout, cmd, fs)
		return exitOK
	}
	if err == nil && (len(pos) < cmd.nargs[0] || len(pos) > cmd.nargs[1]) {
		err = usagef("want %s", argsText(cmd))
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n\n", cmd.path(), err)
		writeUsage(stderr, cmd, fs)
		return exitUsage
	}
	g.url, g.key = firstNonEmpty(g.url, getenv(envURL), urlDefault), firstNonEmpty(g.key, getenv(envKey))
	c, err := client.New(g.url, g.key, client.WithUserAgent("sluice-cli"), client.WithHTTPClient(&http.Client{}))
	if err != nil {
		fmt.Fprintf(stderr, "sluice: %v (set --url and --key, or $%s and $%s)\n", err, envURL, envKey)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	err = runCmd(ctx, &env{c: c, json: g.json, stdin: stdin, stdout: stdout}, pos)
	return report(err, g.json, stdout, stderr)
}

// report writes err (nil: nothing) and returns the exit code.
func report(err error, asJSON bool, stdout, stderr io.Writer) int {
	var ue *usageError
	var e *client.Error
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errRefused):
		return exitRefused
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		return exitUsage
	case errors.As(err, &e):
		if asJSON && len(e.Body) > 0 {
			_ = rawJSON(stdout, e.Body)
		}
		fmt.Fprintln(stderr, err) // "sluice: METHOD PATH: status code: message"
		if len(e.Problems) > 1 {
			for _, p := range e.Problems {
				fmt.Fprintf(stderr, "  %s: %s\n", firstNonEmpty(p.Field, "-"), p.Message)
			}
		}
		if errors.Is(err, client.ErrRateLimited) || errors.Is(err, client.ErrBacklogFull) {
			return exitRefused
		}
		return exitError
	}
	fmt.Fprintf(stderr, "sluice: %v\n", err)
	return exitError
}

func isHelp(a string) bool { return a == "-h" || a == "--help" || a == "-help" || a == "help" }

func groupOf(args []string) string {
	if len(args) > 0 && slices.ContainsFunc(commands, func(c *command) bool { return c.group == args[0] }) {
		return args[0]
	}
	return ""
}

// find returns the command args name and the arguments after it; a known
// group without a known command is (nil, the rest, nil).
func find(args []string) (*command, []string, error) {
	if len(args) == 0 {
		return nil, nil, usagef("no command")
	}
	group := groupOf(args)
	if group == "" {
		return nil, nil, usagef("unknown command %q", args[0])
	}
	for _, c := range commands {
		if c.group == group && c.name == "" { // a command without subcommands
			return c, args[1:], nil
		}
	}
	if len(args) > 1 {
		for _, c := range commands {
			if c.group == group && c.name == args[1] {
				return c, args[2:], nil
			}
		}
		if !isHelp(args[1]) {
			return nil, nil, usagef("unknown command %q %q", group, args[1])
		}
	}
	return nil, args[1:], nil
}

// parseInterleaved parses fs's flags wherever they stand among the
// positional arguments (a "--" ends the flags), and returns those.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%v", err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

func argsText(c *command) string {
	if c.args == "" {
		return "no arguments"
	}
	return c.args
}

// writeOverview lists the commands (of group, or all).
func writeOverview(w io.Writer, group string) {
	fmt.Fprintln(w, "sluice operates a Sluice throttler through its HTTP API.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "usage: sluice [--url URL] [--key KEY] [--json] <command> <subcommand> [flags] [args]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands {
		if group == "" || c.group == group {
			fmt.Fprintf(w, "  %-28s %s\n", strings.TrimPrefix(c.path()+" "+c.args, "sluice "), c.summary)
		}
	}
	fmt.Fprintf(w, "\n$%s and $%s give the URL and key; --help on a command shows its flags and an example.\n", envURL, envKey)
	fmt.Fprintln(w, "exit codes: 0 done, 1 error, 2 usage, 3 refused (rate limited, backlog full, check denied).")
}

// writeUsage is a command's --help.
func writeUsage(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s [flags] %s\n\n%s\n\nflags:\n", c.path(), c.args, c.summary)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprintf(w, "\nexample:\n  %s\n", c.example)
}

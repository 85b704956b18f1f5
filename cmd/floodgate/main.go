// Command floodgate is Floodgate's one binary: the gateway, the decision
// service, the simulator, the load tools and the configuration checker.
// It holds the table of subcommands and their flags; the processes that
// decide are built by internal/app, the simulator is internal/simulate,
// the load tools internal/loadgen.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	// The time zone database, inside the binary: calendar quotas in any
	// zone work where the system has none (a container image FROM scratch).
	_ "time/tzdata"

	"github.com/floodgate/floodgate/internal/buildinfo"
	"github.com/floodgate/floodgate/internal/cli"
	"github.com/floodgate/floodgate/internal/loadgen"
	"github.com/floodgate/floodgate/internal/simulate"
)

// command is one subcommand of the binary.
type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands are the subcommands, in the order floodgate help lists them.
var commands = []command{
	{"bench", "measure decisions per second against a store", loadgen.Bench},
	{"check", "validate a policy file and print its limits", runCheck},
	{"explain", "explain how the gateway would answer one request, limit by limit", runExplain},
	{"key", "make an API key for a usage plan (key new) or hash one (key hash)", runKey},
	{"replay", "replay access logs through a policy: who would be refused, and when", runReplay},
	{"rls", "Envoy's rate-limit service, set up as envoyproxy/ratelimit is (its environment variables)", runRLS},
	{"rls-bench", "load-test an Envoy RLS service (serve, bare, load); see scripts/bench-rls.sh", loadgen.RLS},
	{"serve", "run the gateway: a rate-limiting reverse proxy", runServe},
	{"simulate", "replay arrivals through one algorithm and show every decision", simulate.Run},
	{"version", "print the version", runVersion},
}

// lookup finds a command by name.
func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// runVersion prints the build: the module version, the commit ("-dirty"
// when the tree held changes), the Go version and the date (package
// buildinfo says where each comes from).
func runVersion(_ context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
			_, err := fmt.Fprintln(stdout, "usage: floodgate version\n\nPrints the module version, the commit, the Go version and the date of the build.")
			return err
		}
		return usagef("version: unexpected argument %q", args[0])
	}
	in := buildinfo.Read()
	_, err := fmt.Fprintf(stdout, "floodgate %s\ncommit: %s\ngo:     %s\ndate:   %s\n", in.Version, in.Commit, in.GoVersion, in.Date)
	return err
}

// The errors of the commands (package cli).
type (
	usageError = cli.UsageError
	exitError  = cli.ExitError
)

var usagef = cli.Usagef

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: floodgate <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'floodgate <command> -h' for the flags of a command.")
}

// stopsOnItsOwn lists the commands that watch their context and end
// gracefully when it is cancelled (a server finishes the requests in
// flight). Every other command is interrupted at once: it may be blocked
// reading standard input or a FIFO, which no context reaches.
var stopsOnItsOwn = map[string]bool{"serve": true, "rls": true, "bench": true, "rls-bench": true}

// servers lists the commands that run until they are stopped. Their log
// and access log may go to a pipe whose reader goes away while they serve
// (a log shipper that restarts, "| tee" ended): they lose those lines (the
// writes fail) and go on serving, instead of being killed by SIGPIPE. The
// other commands end on SIGPIPE, as "floodgate check ... | head" expects.
var servers = map[string]bool{"serve": true, "rls": true}

// errInterrupted ends a command interrupted by SIGINT or SIGTERM.
var errInterrupted = &exitError{Code: 130, Err: errors.New("floodgate: interrupted")}

// run is the whole program, testable: it returns instead of exiting.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return usagef("floodgate: no command given")
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return nil
	case "help":
		if len(args) > 1 {
			if _, ok := lookup(args[1]); ok {
				return run(ctx, []string{args[1], "-h"}, stdout, stderr)
			}
			return usagef("floodgate: unknown command %q (run 'floodgate help')", args[1])
		}
		usage(stdout)
		return nil
	case "-version", "--version":
		args = []string{"version"}
	}
	cmd, ok := lookup(args[0])
	if !ok {
		return usagef("floodgate: unknown command %q (run 'floodgate help')", args[0])
	}
	if stopsOnItsOwn[args[0]] {
		return cmd.run(ctx, args[1:], stdout, stderr)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.run(ctx, args[1:], stdout, stderr) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		// A read of standard input or a FIFO may never return; the
		// process exits without it.
		return errInterrupted
	}
}

// parseFlags parses a command's flags (cli.ParseFlags).
var parseFlags = cli.ParseFlags

// exitCode maps an error from run to the process exit status.
var exitCode = cli.ExitCode

// captureStdLog says that serve and rls route the log package's lines into
// their logger (app.StdLog): true in the process, false where tests call
// run, which share one log package.
var captureStdLog = false

func main() {
	captureStdLog = true
	server := len(os.Args) > 1 && servers[os.Args[1]]
	if server {
		signal.Ignore(syscall.SIGPIPE)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		// After the first signal, a second one ends the process at once;
		// but a server's drain is bounded and outlives SIGTERM again (a
		// runtime stopping the container again, a supervisor and a script
		// both signalling it), as envoyproxy/ratelimit's does: only SIGINT
		// (Ctrl-C twice) ends it. The signals' own actions are back before
		// the drain begins (stop), so that a second signal sent once the
		// drain shows is never lost; one that came before that is acted on
		// here, as it would have been.
		<-sigs
		if server {
			signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM)
		}
		signal.Stop(sigs)
		select {
		case s := <-sigs:
			if sig, ok := s.(syscall.Signal); ok && !(server && sig == syscall.SIGTERM) {
				_ = syscall.Kill(os.Getpid(), sig)
			}
		default:
		}
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	signal.Stop(sigs)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(exitCode(err))
}

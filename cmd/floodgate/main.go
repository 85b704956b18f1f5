// Command floodgate is Floodgate's one binary: the gateway, the decision
// service, the simulator, the load tool and the configuration checker.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand of the binary.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is filled by each subcommand's file in its init function.
var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	commands[name] = command{summary: summary, run: run}
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func init() {
	register("version", "print the version", func(_ context.Context, _ []string, stdout, _ io.Writer) error {
		_, err := fmt.Fprintln(stdout, "floodgate", version)
		return err
	})
}

// usageError marks an error caused by bad arguments: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// usagef returns a usageError with a formatted message.
func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitError carries an exit status other than 0, 1 or 2 semantics set by a
// subcommand (floodgate check exits 1 on an invalid file).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: floodgate <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'floodgate <command> -h' for the flags of a command.")
}

// stopsOnItsOwn lists the commands that watch their context and end
// gracefully when it is cancelled (a server finishes the requests in
// flight). Every other command is interrupted at once: it may be blocked
// reading standard input or a FIFO, which no context reaches.
var stopsOnItsOwn = map[string]bool{"serve": true, "bench": true, "rls-bench": true}

// errInterrupted ends a command interrupted by SIGINT or SIGTERM.
var errInterrupted = &exitError{code: 130, err: errors.New("floodgate: interrupted")}

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
			if _, ok := commands[args[1]]; ok {
				return run(ctx, []string{args[1], "-h"}, stdout, stderr)
			}
			return usagef("floodgate: unknown command %q (run 'floodgate help')", args[1])
		}
		usage(stdout)
		return nil
	case "-version", "--version":
		args = []string{"version"}
	}
	cmd, ok := commands[args[0]]
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

// parseFlags parses a command's flags. A bad flag is returned, not printed,
// so that main prints it once; -h prints usage and the flags to stdout and
// returns help = true.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer, usage string) (help bool, err error) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return true, nil
		}
		return false, usagef("%s: %v (run 'floodgate %s -h')", fs.Name(), err, fs.Name())
	}
	return false, nil
}

// exitCode maps an error from run to the process exit status.
func exitCode(err error) int {
	var ue *usageError
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		return 2
	case errors.As(err, &ee):
		return ee.code
	}
	return 1
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, a second one ends the process at once.
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(exitCode(err))
}

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runMainEnv makes the test binary run the command itself (TestMain), so
// that tests can start floodgate as a process without building it.
const runMainEnv = "FLOODGATE_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestHelpAndErrors: help goes to stdout for every command, "help CMD"
// shows that command's help, --version works, and a bad flag is reported
// once (by main, from the returned error), not also by the flag package.
func TestHelpAndErrors(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"serve", "check", "simulate", "bench", "rls-bench"} {
		var out, errOut bytes.Buffer
		if err := run(ctx, []string{"help", name}, &out, &errOut); err != nil {
			t.Errorf("help %s: %v", name, err)
		}
		if !strings.Contains(out.String(), "floodgate "+name) || errOut.Len() != 0 {
			t.Errorf("help %s: stdout %q, stderr %q", name, out.String(), errOut.String())
		}
		out.Reset()
		errOut.Reset()
		if err := run(ctx, []string{name, "-h"}, &out, &errOut); err != nil || out.Len() == 0 || errOut.Len() != 0 {
			t.Errorf("%s -h: err %v, stdout %d bytes, stderr %q", name, err, out.Len(), errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"--version"}, &out, &errOut); err != nil || !strings.HasPrefix(out.String(), "floodgate ") {
		t.Errorf("--version: %v %q", err, out.String())
	}
	for _, args := range [][]string{{"serve", "--nope"}, {"check", "--nope"}, {"simulate", "--nope"}, {"key", "new", "--nope"}} {
		out.Reset()
		errOut.Reset()
		err := run(ctx, args, &out, &errOut)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "-nope") || errOut.Len() != 0 || out.Len() != 0 {
			t.Errorf("%v: err %v, stdout %q, stderr %q (want the error once, returned)", args, err, out.String(), errOut.String())
		}
	}
}

// TestInterruptWhileReading: SIGINT ends a command that waits on standard
// input or a FIFO at once, with status 130.
func TestInterruptWhileReading(t *testing.T) {
	bin, err := os.Executable() // this test binary, which runs main (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(t.TempDir(), "policy.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"key", "hash"}, {"simulate", "--algorithm", "token_bucket", "--rate", "1", "--burst", "1", "--arrivals-file", "-"}, {"check", "--config", fifo}} {
		t.Run(args[0], func(t *testing.T) {
			// A signal that comes before the process has set up its
			// handling ends it as SIGINT does any program (killed by the
			// signal, not status 130): a loaded machine may take longer
			// than the first wait to get there, so the wait grows.
			for _, wait := range []time.Duration{300 * time.Millisecond, time.Second, 3 * time.Second, 8 * time.Second} {
				if !interruptAfter(t, bin, args, wait) {
					return
				}
				t.Logf("%v: the signal came before the process handled signals; waiting longer than %v", args, wait)
			}
			t.Errorf("%v: killed by SIGINT every time, even %v after it started: it does not handle the signal", args, 8*time.Second)
		})
	}
}

// TestSimulateDocsHelp holds docs/simulate.md's copy of the help to what
// the command prints.
func TestSimulateDocsHelp(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "simulate.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "$ floodgate simulate -h\n")
	if !ok {
		t.Fatal("docs/simulate.md shows no help")
	}
	shown, _, _ := strings.Cut(rest, "```")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"simulate", "-h"}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if shown != out.String() {
		t.Errorf("docs/simulate.md's help is stale:\n--- docs\n%s\n--- command\n%s", shown, out.String())
	}
}

// interruptAfter runs the test binary as floodgate with args and a
// standard input that never ends, sends SIGINT after wait, and checks that
// the command ends with status 130. It reports whether the process was
// killed by the signal instead, as one is before it handles signals.
func interruptAfter(t *testing.T, bin string, args []string, wait time.Duration) (early bool) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	stdin, w, err := os.Pipe() // never written nor closed while the command runs
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cmd.Stdin = stdin
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Give it time to block in its read: it must not end by itself.
	select {
	case err := <-done:
		t.Fatalf("%v ended before the signal: %v", args, err)
	case <-time.After(wait):
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGINT {
				return true
			}
		}
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Errorf("%v after SIGINT: %v, want exit status 130", args, err)
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%v ignored SIGINT", args)
	}
	return false
}

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/replay"
)

// TestReplayCLI: the text report, the HTML page, progress on stderr, and
// bad arguments.
func TestReplayCLI(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	var lines []string
	for i := range 8 {
		lines = append(lines, `{"time":"2026-11-30T10:00:00.`+strings.Repeat("0", 5)+string(rune('0'+i))+`Z","ip":"203.0.113.7","method":"GET","path":"/students/9","status":200,"decision":"allow"}`)
	}
	if err := os.WriteFile(log, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	html := filepath.Join(dir, "report.html")
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"replay", "--config", "../../examples/school.yaml", "--log", log, "--html", html}, &out, &errb)
	if err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	for _, want := range []string{"8 requests: 5 allowed, 3 denied", "stage.dev", "203.0.113.7", "against the decisions in the log: 5 of 8 the same"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
	if errb.Len() != 0 {
		t.Errorf("progress for a replay shorter than a second: %q", errb.String())
	}
	if b, err := os.ReadFile(html); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("html: %v", err)
	}
	for _, args := range [][]string{
		{"replay", "--log", log},
		{"replay", "--config", "../../examples/school.yaml"},
		{"replay", "--config", "../../examples/school.yaml", "--log", log, "--denied-status", "abc"},
		{"replay", "--config", "../../examples/school.yaml", "--log", log, "--fail-above", "3"},
		{"replay", "--config", "../../examples/school.yaml", "--log", log, "--compare", "../../examples/school.yaml", "--fail-above", "x%"},
	} {
		if err := run(context.Background(), args, &out, &errb); exitCode(err) != 2 {
			t.Errorf("%v: %v (exit %d), want a usage error", args, err, exitCode(err))
		}
	}
	if err := run(context.Background(), []string{"replay", "--config", "../../examples/school.yaml", "--log", filepath.Join(dir, "none")}, &out, &errb); exitCode(err) != 1 {
		t.Errorf("a missing log: %v", err)
	}
}

// TestReplayProgress: a long replay reports on stderr every five seconds,
// and when done.
func TestReplayProgress(t *testing.T) {
	var b bytes.Buffer
	p := progressPrinter(&b)
	for _, pr := range []replay.Progress{
		{Read: 10 << 20, Size: 100 << 20, Requests: 1000, Elapsed: 500 * time.Millisecond},
		{Read: 20 << 20, Size: 100 << 20, Requests: 2000, Elapsed: 2 * time.Second},
		{Read: 60 << 20, Size: 100 << 20, Requests: 6000, Elapsed: 6 * time.Second},
		{Read: 70 << 20, Size: 100 << 20, Requests: 7000, Elapsed: 7 * time.Second},
		{Read: 100 << 20, Size: 100 << 20, Requests: 10000, Elapsed: 9 * time.Second},
	} {
		p(pr)
	}
	want := "replay:  60% of 100.0 MB, 6000 requests, 6s\nreplay: 100% of 100.0 MB, 10000 requests, 9s\n"
	if b.String() != want {
		t.Errorf("got\n%swant\n%s", b.String(), want)
	}
}

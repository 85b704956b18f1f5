package simulate

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/cli"
)

// TestStartPastTheEndOfTime: a --start or an arrival past the last instant
// Unix nanoseconds hold (2262-04-11T23:47:16.854775807Z) is a bad flag: one
// line naming it, exit status 2; never a decision on a wrapped-around clock
// ("time went backwards").
func TestStartPastTheEndOfTime(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--algorithm", "token_bucket", "--rate", "1", "--burst", "1", "--start", "2300-01-01T00:00:00Z", "--arrivals", "0"}, "--start"},
		{[]string{"--algorithm", "quota", "--limit", "2", "--period", "day", "--start", "2300-01-01T00:00:00Z", "--arrivals", "0"}, "--start"},
		{[]string{"--algorithm", "fixed_window", "--limit", "2", "--window", "1s", "--start", "2262-04-11T23:00:00Z", "--arrivals", "0,1h"}, "arrival 2"},
	} {
		var out, errb bytes.Buffer
		err := Run(context.Background(), c.args, &out, &errb)
		if err == nil {
			t.Errorf("%v: no error:\n%s", c.args, out.String())
			continue
		}
		if code := cli.ExitCode(err); code != 2 {
			t.Errorf("%v: exit status %d, want 2 (%v)", c.args, code, err)
		}
		if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "backwards") {
			t.Errorf("%v: message %q does not name %s", c.args, msg, c.want)
		}
	}
}

// TestInstancesBounded: --instances past maxInstances is a bad flag (one
// line naming it, exit status 2), not an attempt to make a state for each
// of a billion instances, which ended the process out of memory; the
// bound itself runs.
func TestInstancesBounded(t *testing.T) {
	t.Parallel()
	args := func(n string) []string {
		return []string{"--algorithm", "fixed_window", "--limit", "100000000000", "--window", "1s", "--instances", n, "--arrivals", "0*3,1@100000"}
	}
	var out, errb bytes.Buffer
	err := Run(context.Background(), args("1000000000"), &out, &errb)
	if code := cli.ExitCode(err); code != 2 || !strings.Contains(fmt.Sprint(err), "--instances must be at most 100000") || out.Len() != 0 {
		t.Errorf("--instances 1000000000: exit status %d, %v, %d bytes written", code, err, out.Len())
	}
	out.Reset()
	if err := Run(context.Background(), args("100000"), &out, &errb); err != nil || !strings.Contains(out.String(), "allowed 4 of 4\n100000 instances at split_limit(100000000000, 100000) = 1000000 each") {
		t.Errorf("--instances 100000: %v\n%s", err, out.String())
	}
}

// TestBadArrivalsLineNamedAndCut: an --arrivals-file line longer than the
// reader's 1 MiB is a bad flag naming the file and the line, not a bare
// "token too long"; a bad time or cost of 900 KB is quoted cut after
// maxQuote bytes, not whole on stderr.
func TestBadArrivalsLineNamedAndCut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	huge := strings.Repeat("x", 900<<10)
	for _, c := range []struct {
		name, body, want string
	}{
		{"long.txt", "0\n0.5 2\n1 " + strings.Repeat("9", 2<<20) + "\n", "long.txt: line 3: longer than 1 MiB"},
		{"cost.txt", "0\n1 " + huge + "\n", `cost.txt: line 2: cost "xxxx`},
		{"time.txt", "# a trace\n" + huge + " 1\n", `time.txt: line 2: "xxxx`},
	} {
		path := filepath.Join(dir, c.name)
		if err := os.WriteFile(path, []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		err := Run(context.Background(), []string{"--algorithm", "token_bucket", "--rate", "1", "--burst", "1", "--arrivals-file", path}, &out, &errb)
		msg := fmt.Sprint(err)
		if code := cli.ExitCode(err); code != 2 || !strings.Contains(msg, c.want) || len(msg) > len(path)+maxQuote+128 {
			t.Errorf("%s: exit status %d, %d bytes %.200q, want %q cut", c.name, code, len(msg), msg, c.want)
		}
	}
}

package simulate

import (
	"bytes"
	"context"
	"fmt"
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

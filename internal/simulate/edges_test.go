package simulate

import (
	"bytes"
	"context"
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

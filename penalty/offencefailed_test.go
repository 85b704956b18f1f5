package penalty

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/policy"
)

// TestOffencesFailedLoggedOnceASecond: an offence whose call to Redis
// gets no answer in time (Redis stopped with SIGSTOP past the call's
// deadline) is not logged as uncounted, since Redis counts it, and bans
// the key, once it runs again; and a flood of offences while Redis is
// down logs a line a second, with the count held back, not one per
// offence. Before, the first was logged "offence not counted" though the
// key was banned, and 1,000 refusals with Redis down logged 1,000 lines.
func TestOffencesFailedLoggedOnceASecond(t *testing.T) {
	srv := redistest.Start(t)
	c, err := redisconn.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var logged bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logged}, nil))
	lines := func(msg string) int {
		logMu.Lock()
		defer logMu.Unlock()
		return strings.Count(logged.String(), msg)
	}
	r := flood
	r.After = 1
	box, err := New([]config.Ban{r}, Options{Backend: NewRedis(c, 0), Poll: 10 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()

	// An offence first, so that Redis has the script when it is stopped.
	box.Outcome(context.Background(), "ip:10.0.0.9", "", "", true, policy.IdentityClientIP, 429)
	srv.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	box.Outcome(ctx, "ip:10.0.0.1", "", "", true, policy.IdentityClientIP, 429)
	cancel()
	srv.Resume()
	waitFor(t, func() bool { _, _, banned := box.Banned("ip:10.0.0.1", "", ""); return banned })
	if n := lines("offence not counted"); n != 0 {
		t.Errorf("an offence Redis counted late is logged as not counted (%d lines)", n)
	}
	if n := lines("offence not answered in time"); n != 1 {
		t.Errorf("%d lines of an offence not answered in time, want 1", n)
	}

	srv.Stop()
	const offences = 1000
	for i := range offences {
		box.Outcome(context.Background(), fmt.Sprintf("ip:10.1.%d.%d", i/256, i%256), "", "", true, policy.IdentityClientIP, 429)
	}
	if n := lines("offence not"); n > 10 {
		t.Errorf("%d offences with Redis down logged %d lines, want one a second", offences, n)
	}
}

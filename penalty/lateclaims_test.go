package penalty

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/promtest"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/policy"
)

// stalledClaims is a client that, while armed, stops its Redis (SIGSTOP)
// before it sends each claim of a ban its maker made, gives the claim
// 10 ms, and resumes Redis once the claim has given up: a Redis that
// stalls right after each ban it answers, and runs the claims their
// callers no longer wait for.
type stalledClaims struct {
	rueidis.Client
	srv   *redistest.Server
	armed atomic.Bool
}

func (s *stalledClaims) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c := cmd.Commands() // read before the call, which recycles them
	claim := slices.Contains(c, redisUnseen) && !slices.Contains(c, redisChanges)
	if !claim || !s.armed.Load() {
		return s.Client.Do(ctx, cmd)
	}
	s.srv.Pause()
	defer s.srv.Resume()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	return s.Client.Do(ctx, cmd)
}

// scriptCalls returns how many scripts the Redis at srv ran (EVAL and
// EVALSHA), from its commandstats.
func scriptCalls(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	info, err := srv.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		for _, cmd := range []string{"cmdstat_eval:calls=", "cmdstat_evalsha:calls="} {
			if rest, ok := strings.CutPrefix(line, cmd); ok {
				c, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				if err != nil {
					t.Fatalf("commandstats: %q: %v", line, err)
				}
				n += c
			}
		}
	}
	return n
}

// TestLateClaimsSentTogether: after a Redis stall that left the claims of
// 100 bans unanswered (Redis stopped with SIGSTOP after each ban it
// answered, past its claim's deadline), the next poll sends them again in
// one call, and counts the 100 bans. Before, it sent them one call each:
// 100 calls, and as many as 10,000 after a longer stall.
func TestLateClaimsSentTogether(t *testing.T) {
	srv := redistest.Start(t)
	r := flood
	r.After = 1
	reg := prometheus.NewRegistry()
	stalled := &stalledClaims{Client: clientsOf(t, srv)(), srv: srv}
	be := NewRedis(stalled, 0)
	box, err := New([]config.Ban{r}, Options{Backend: be, Poll: time.Hour, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	ctx := context.Background()
	// A ban first, so that Redis has the scripts when it is stopped.
	box.Outcome(ctx, "ip:10.0.0.9", "", "", true, policy.IdentityClientIP, 429)
	const bans = 100
	stalled.armed.Store(true)
	for i := range bans {
		box.Outcome(ctx, fmt.Sprintf("ip:10.1.0.%d", i), "", "", true, policy.IdentityClientIP, 429)
	}
	stalled.armed.Store(false)
	be.claimMu.Lock()
	pending := len(be.pending)
	be.claimMu.Unlock()
	if pending != bans {
		t.Fatalf("%d claims unanswered, want %d", pending, bans)
	}

	late, calls := sendLate(t, srv, be)
	t.Logf("%d claims sent again in %d calls", bans, calls)
	if calls != 1 {
		t.Errorf("%d claims sent again in %d calls, want 1", bans, calls)
	}
	if len(late) != bans {
		t.Errorf("%d bans counted from the claims sent again, want %d", len(late), bans)
	}
	countLate(t, box, late)
	if n := promtest.Value(t, reg, "floodgate_bans_total", nil); n != bans+1 {
		t.Errorf("floodgate_bans_total: %v, want %d", n, bans+1)
	}
}

// lostClaims is a client that, while armed, loses each claim of a ban
// its maker made: Redis is sent a command it does not know in its place,
// so the call fails and the claim never runs, as over a connection that
// broke, and the claim is the maker's to send again.
type lostClaims struct {
	rueidis.Client
	armed atomic.Bool
}

func (l *lostClaims) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c := cmd.Commands() // read before the call, which recycles them
	if l.armed.Load() && slices.Contains(c, redisUnseen) && !slices.Contains(c, redisChanges) {
		return l.Client.Do(ctx, l.Client.B().Arbitrary("NOSUCHCOMMAND").Build())
	}
	return l.Client.Do(ctx, cmd)
}

// TestManyLateClaims: the claims of more bans than one call sends
// (claimBatch), lost on their way, are sent again in calls of claimBatch
// and count every ban once; and the claims kept to send again stay within
// the change log (changeLog) however many bans lose theirs, the newest
// kept. Before, no test made more than 100.
func TestManyLateClaims(t *testing.T) {
	srv := redistest.Start(t)
	r := flood
	r.After = 1
	lost := &lostClaims{Client: clientsOf(t, srv)()}
	be := NewRedis(lost, 2*changeLog)
	reg := prometheus.NewRegistry()
	box, err := New([]config.Ban{r}, Options{Backend: be, Poll: time.Hour, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	ctx := context.Background()
	pending := func() (n int, first, last string) {
		be.claimMu.Lock()
		defer be.claimMu.Unlock()
		if n = len(be.pending); n > 0 {
			first, last = be.pending[0].ban.Key, be.pending[n-1].ban.Key
		}
		return n, first, last
	}
	offend := func(from, to int) {
		for i := from; i < to; i++ {
			box.Outcome(ctx, fmt.Sprintf("ip:10.%d.%d.%d", i>>16, i>>8&255, i&255), "", "", true, policy.IdentityClientIP, 429)
		}
	}
	counted := func() float64 { return promtest.Value(t, reg, "floodgate_bans_total", nil) }
	// A ban first, so that Redis has the scripts: a script it does not
	// have costs a second call (EVALSHA, then EVAL).
	box.Outcome(ctx, "ip:192.0.2.1", "", "", true, policy.IdentityClientIP, 429)

	// More than two calls' worth of lost claims.
	const some = 2*claimBatch + 500
	lost.armed.Store(true)
	offend(0, some)
	lost.armed.Store(false)
	if n, _, _ := pending(); n != some {
		t.Fatalf("%d claims kept to send again, want %d", n, some)
	}
	late, calls := sendLate(t, srv, be)
	if calls != 3 {
		t.Errorf("%d claims sent again in %d calls, want 3", some, calls)
	}
	if len(late) != some {
		t.Errorf("%d bans counted from the claims sent again, want %d", len(late), some)
	}
	countLate(t, box, late)
	if n := counted(); n != some+1 {
		t.Errorf("floodgate_bans_total: %v, want %d", n, some+1)
	}
	if n, _, _ := pending(); n != 0 {
		t.Errorf("%d claims still kept after they were answered", n)
	}

	// More lost claims than the change log holds: the oldest are let go,
	// the newest changeLog kept.
	const more = changeLog + 700
	lost.armed.Store(true)
	offend(some, some+more)
	lost.armed.Store(false)
	n, first, last := pending()
	wantFirst := fmt.Sprintf("ip:10.%d.%d.%d", (some+700)>>16, (some+700)>>8&255, (some+700)&255)
	wantLast := fmt.Sprintf("ip:10.%d.%d.%d", (some+more-1)>>16, (some+more-1)>>8&255, (some+more-1)&255)
	if n != changeLog || first != wantFirst || last != wantLast {
		t.Fatalf("%d claims kept, %s to %s; want %d, %s to %s", n, first, last, changeLog, wantFirst, wantLast)
	}
	late, calls = sendLate(t, srv, be)
	t.Logf("%d claims kept of %d lost, sent again in %d calls, %d bans counted from them", n, more, calls, len(late))
	if calls != changeLog/claimBatch {
		t.Errorf("%d claims sent again in %d calls, want %d", n, calls, changeLog/claimBatch)
	}
	if len(late) != changeLog {
		t.Errorf("%d bans counted from the claims sent again, want %d", len(late), changeLog)
	}
}

// sendLate sends again the claims be kept (Redis.Late) and returns the
// bans they say are be's to count, and how many script calls Redis at srv
// ran meanwhile.
func sendLate(t *testing.T, srv *redistest.Server, be *Redis) ([]Ban, int) {
	t.Helper()
	before := scriptCalls(t, srv)
	late := be.Late(context.Background())
	return late, scriptCalls(t, srv) - before
}

// countLate has box count the bans of late, as its poll does with what
// Late returns, and read what changed.
func countLate(t *testing.T, box *Box, late []Ban) {
	t.Helper()
	for _, ban := range late {
		box.banned(ban)
	}
	if err := box.look(context.Background()); err != nil {
		t.Fatal(err)
	}
}

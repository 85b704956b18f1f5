package penalty

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/promtest"
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
	// The offence reaches Redis once its caller gave up waiting (made
	// again when Redis never ran it: offendLate); each try logs a line at
	// most.
	bans := bansHeld(t, srv)
	tries := offendLate(t, srv, box, "ip:10.0.0.1", func() bool { return bans() == "2" }, nil)
	waitFor(t, func() bool { _, _, banned := box.Banned("ip:10.0.0.1", "", ""); return banned })
	if n := lines("offence not counted"); n != 0 {
		t.Errorf("an offence Redis counted late is logged as not counted (%d lines)", n)
	}
	if n := lines("offence not answered in time"); n < 1 || n > tries {
		t.Errorf("%d lines of an offence not answered in time in %d tries, want 1 to %d", n, tries, tries)
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

// TestLateBanCountedOnce: a ban Redis makes after the instance whose
// offence made it gave up waiting (Redis stopped with SIGSTOP past the
// call's deadline) is counted in floodgate_bans_total and logged
// "penalty: banned" once across the instances: by the first to read it
// from the change log. Before, no instance counted or logged it, though
// both enforced it. A ban answered in time is counted once too, however
// the instances' reads fall around it.
func TestLateBanCountedOnce(t *testing.T) {
	srv := redistest.Start(t)
	r := flood
	r.After = 2
	var logged bytes.Buffer
	var logMu sync.Mutex
	banLines := func(key string) (n int) {
		logMu.Lock()
		defer logMu.Unlock()
		for _, l := range strings.Split(logged.String(), "\n") {
			if strings.Contains(l, `msg="penalty: banned"`) && strings.Contains(l, " key="+key+" ") {
				n++
			}
		}
		return n
	}
	var boxes [2]*Box
	var regs [2]*prometheus.Registry
	for i := range boxes {
		c, err := redisconn.Open("redis://" + srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		regs[i] = prometheus.NewRegistry()
		log := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logged}, nil)).With("instance", i)
		boxes[i], err = New([]config.Ban{r}, Options{Backend: NewRedis(c, 0), Poll: 10 * time.Millisecond, Logger: log, Registerer: regs[i]})
		if err != nil {
			t.Fatal(err)
		}
		defer boxes[i].Close()
	}
	a := boxes[0]
	counted := func() float64 {
		return promtest.Value(t, regs[0], "floodgate_bans_total", nil) + promtest.Value(t, regs[1], "floodgate_bans_total", nil)
	}
	bannedEverywhere := func(ip string) func() bool {
		return func() bool {
			_, _, x := boxes[0].Banned(ip, "", "")
			_, _, y := boxes[1].Banned(ip, "", "")
			return x && y
		}
	}

	// A first offence of the key, answered: Redis has the script when it
	// is stopped, and the second offence bans.
	a.Outcome(context.Background(), "ip:10.0.0.1", "", "", true, policy.IdentityClientIP, 429)
	// The second, sent while Redis is stopped and given up on. The client
	// may close the connection it waited on when it gives up, and the
	// stopped Redis then never reads the call: no ban comes, the count
	// stays at one, and the offence is made again (ten times at most).
	for try := 0; ; try++ {
		srv.Pause()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		a.Outcome(ctx, "ip:10.0.0.1", "", "", true, policy.IdentityClientIP, 429)
		cancel()
		srv.Resume()
		if within(2*time.Second, bannedEverywhere("ip:10.0.0.1")) {
			break
		}
		if try == 9 {
			t.Fatal("no late ban of ip:10.0.0.1 in 10 tries")
		}
	}

	// A ban answered in time, after it: once both instances hold it, both
	// have read the late one's change too.
	a.Outcome(context.Background(), "ip:10.0.0.2", "", "", true, policy.IdentityClientIP, 429)
	a.Outcome(context.Background(), "ip:10.0.0.2", "", "", true, policy.IdentityClientIP, 429)
	waitFor(t, bannedEverywhere("ip:10.0.0.2"))
	if n := counted(); n != 2 {
		t.Errorf("floodgate_bans_total over both instances: %v, want 2 (a late ban and one in time)", n)
	}
	if n := banLines("ip:10.0.0.1"); n != 1 {
		t.Errorf("the late ban logged %d times, want once:\n%s", n, logged.String())
	}
}

// stalledClaim is a client that stops its Redis (SIGSTOP) before it sends
// the first claim of a ban with a deadline, and resumes it once the call
// has given up: a Redis that stalls right after it answered the ban, and
// runs the claim its caller no longer waits for.
type stalledClaim struct {
	rueidis.Client
	srv  *redistest.Server
	done atomic.Bool
}

func (s *stalledClaim) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c := cmd.Commands() // read before the call, which recycles them
	claim := slices.Contains(c, redisUnseen) && !slices.Contains(c, redisChanges)
	if _, timed := ctx.Deadline(); !claim || !timed || s.done.Swap(true) {
		return s.Client.Do(ctx, cmd)
	}
	s.srv.Pause()
	defer s.srv.Resume()
	return s.Client.Do(ctx, cmd)
}

// TestClaimAnsweredLateCounted: a ban whose maker claimed it (took it
// out of the bans no instance counted) while Redis stalled past the
// offence's deadline is counted once, by its maker, when the claim runs
// after the caller gave up. Before, the maker took the unanswered claim
// for another instance's, and Redis, running it once resumed, left the
// ban to no instance: floodgate_bans_total counted 2 of 3 bans.
func TestClaimAnsweredLateCounted(t *testing.T) {
	srv := redistest.Start(t)
	c, err := redisconn.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := flood
	r.After = 1
	reg := prometheus.NewRegistry()
	box, err := New([]config.Ban{r}, Options{Backend: NewRedis(&stalledClaim{Client: c, srv: srv}, 0), Poll: 10 * time.Millisecond,
		Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	// A ban first, so that Redis has the scripts when it is stopped.
	box.Outcome(context.Background(), "ip:10.0.0.9", "", "", true, policy.IdentityClientIP, 429)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	box.Outcome(ctx, "ip:10.0.0.1", "", "", true, policy.IdentityClientIP, 429)
	cancel()
	if _, _, banned := box.Banned("ip:10.0.0.1", "", ""); !banned {
		t.Fatal("the key is not banned")
	}
	// A ban answered in time, once the stalled claim has run.
	box.Outcome(context.Background(), "ip:10.0.0.2", "", "", true, policy.IdentityClientIP, 429)
	counted := func() float64 { return promtest.Value(t, reg, "floodgate_bans_total", nil) }
	for deadline := time.Now().Add(5 * time.Second); counted() < 3 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // polls that would count a ban again
	if n := counted(); n != 3 {
		t.Errorf("floodgate_bans_total: %v, want 3 (one ban whose claim Redis answered late, two in time)", n)
	}
}

// stalledRead is a client that, once armed, stops its Redis (SIGSTOP)
// before it sends its next read of what changed, and resumes it once the
// poll has given up on it: Redis runs the read, and its claims, that no
// one waits for.
type stalledRead struct {
	rueidis.Client
	srv   *redistest.Server
	armed atomic.Bool
}

func (s *stalledRead) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c := cmd.Commands() // read before the call, which recycles them
	changes := len(c) > 4 && (c[0] == "EVALSHA" || c[0] == "EVAL") && c[3] == redisVersion && c[4] == redisChanges
	if !changes || !s.armed.Swap(false) {
		return s.Client.Do(ctx, cmd)
	}
	s.srv.Pause()
	defer s.srv.Resume()
	return s.Client.Do(ctx, cmd)
}

// TestClaimReadLateCounted: a ban Redis made after its maker gave up
// waiting is counted once when the read of the instance that claimed it
// gets no answer in time (Redis stopped past the poll's 1 s timeout):
// the instance's next read, from the same version, counts it. Before, the
// claim was taken from the bans no instance counted and its answer lost:
// of two bans, floodgate_bans_total summed 1 over the instances.
func TestClaimReadLateCounted(t *testing.T) {
	srv := redistest.Start(t)
	open := clientsOf(t, srv)
	r := flood
	r.After = 1
	regs := [2]*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	a, err := New([]config.Ban{r}, Options{Backend: NewRedis(open(), 0), Poll: time.Hour, Registerer: regs[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	stalled := &stalledRead{Client: open(), srv: srv}
	b, err := New([]config.Ban{r}, Options{Backend: NewRedis(stalled, 0), Poll: 10 * time.Millisecond, Registerer: regs[1]})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	counted := func() float64 {
		return promtest.Value(t, regs[0], "floodgate_bans_total", nil) + promtest.Value(t, regs[1], "floodgate_bans_total", nil)
	}
	// A ban in time first: Redis has the scripts when it is stopped.
	a.Outcome(context.Background(), "ip:10.0.0.9", "", "", true, policy.IdentityClientIP, 429)
	waitFor(t, func() bool { _, _, banned := b.Banned("ip:10.0.0.9", "", ""); return banned })

	// The offence reaches Redis once its caller gave up waiting (made
	// again when Redis never ran it: offendLate).
	bans := bansHeld(t, srv)
	offendLate(t, srv, a, "ip:10.0.0.1", func() bool { return bans() == "2" }, func() { stalled.armed.Store(true) })
	waitFor(t, func() bool { _, _, banned := b.Banned("ip:10.0.0.1", "", ""); return banned })
	for deadline := time.Now().Add(5 * time.Second); counted() < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // polls that would count a ban again
	if n := counted(); n != 2 {
		t.Errorf("floodgate_bans_total over both instances: %v, want 2 (a ban whose claiming read Redis answered late, one in time)", n)
	}
}

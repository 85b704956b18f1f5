package app

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/redisstore"
)

// TestPeerCountWaitsForABusyRedis: envoyproxy/ratelimit's counters
// (compatibility mode on Redis) are counted within the store's deadline as
// the engine's calls are: a Redis that keeps answering other commands
// ahead of the count (busy, not down; or this process short of CPU, so
// that its replies wait) is waited for up to the hard timeout, instead of
// failing the count after the deadline, which decided the request on
// other counters and counted it as a Redis error.
func TestPeerCountWaitsForABusyRedis(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redisstore.New(redisstore.Options{URL: "redis://" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pc := newPeerCounter(&stores{main: st}, limiter.DefaultTimeout, limiter.DefaultHardTimeout)
	if pc == nil {
		t.Fatal("no peer counter on a Redis store")
	}
	c := st.Client()
	ctx := context.Background()

	// Scripts of about 2 ms each, answered one by one (each is larger
	// than what Redis reads from a connection at once, so that it answers
	// one before it reads the next): Redis busy for about three times the
	// deadline, replying all along.
	const script = "local i = 0 while i < tonumber(ARGV[1]) do i = i + 1 end return i"
	pad := strings.Repeat("x", 20<<10)
	spin := func(n int) rueidis.Completed {
		return c.B().Eval().Script(script).Numkeys(0).Arg(strconv.Itoa(n), pad).Build()
	}
	t0 := time.Now()
	if err := c.Do(ctx, spin(1_000_000)).Error(); err != nil {
		t.Fatal(err)
	}
	per := max(int(2*time.Millisecond*1_000_000/max(time.Since(t0), time.Millisecond)), 1000)
	busy := 3 * limiter.DefaultTimeout / (2 * time.Millisecond)
	cmds := make(rueidis.Commands, busy)
	for i := range cmds {
		cmds[i] = spin(per)
	}
	done := make(chan time.Time, 1)
	go func() {
		for _, r := range c.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				t.Error(err)
				break
			}
		}
		done <- time.Now()
	}()
	time.Sleep(10 * time.Millisecond) // the scripts are on their way

	start := time.Now()
	out := make([]int64, 1)
	err = pc.Count(ctx, []string{"peer_user_u1_60"}, []uint64{3}, []int64{60}, []bool{false}, out)
	took := time.Since(start)
	busyUntil := <-done
	if busyUntil.Sub(start) <= limiter.DefaultTimeout {
		t.Fatalf("Redis was busy for %v after the count began, not past the deadline (%v): the test proves nothing",
			busyUntil.Sub(start), limiter.DefaultTimeout)
	}
	if err != nil {
		t.Fatalf("the count failed after %v behind a Redis that kept answering (busy for %v): %v",
			took.Round(time.Millisecond), busyUntil.Sub(start).Round(time.Millisecond), err)
	}
	if out[0] != 3 {
		t.Fatalf("count %d, want 3", out[0])
	}
}

// TestPeerCountFailsAtTheDeadlineOnAStoppedRedis: a Redis that answers
// nothing (stopped) still fails a count at the store's deadline, not at the
// hard timeout.
func TestPeerCountFailsAtTheDeadlineOnAStoppedRedis(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redisstore.New(redisstore.Options{URL: "redis://" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pc := newPeerCounter(&stores{main: st}, limiter.DefaultTimeout, limiter.DefaultHardTimeout)
	out := make([]int64, 1)
	count := func() error {
		return pc.Count(context.Background(), []string{"peer_user_u2_60"}, []uint64{1}, []int64{60}, []bool{false}, out)
	}
	if err := count(); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	start := time.Now()
	err = count()
	took := time.Since(start)
	if err == nil {
		t.Fatal("a count on a stopped Redis passed")
	}
	if took >= limiter.DefaultHardTimeout {
		t.Fatalf("a count on a stopped Redis failed after %v, want about the deadline (%v)", took, limiter.DefaultTimeout)
	}
}

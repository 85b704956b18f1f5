package penalty

import (
	"context"
	"fmt"
	"strconv"
	"sync"
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

// lateBan makes a ban of key by box, on srv, after box gave up waiting for
// it (Redis stopped with SIGSTOP past the offence's deadline), and waits
// until Redis made it: a ban in the set no instance counted, with no
// claim of its maker's to send again. An offence Redis never ran (the
// client may close the connection it waits on when it gives up, and the
// stopped Redis then never reads the call) is made again, ten times at
// most.
func lateBan(t *testing.T, srv *redistest.Server, box *Box, key string) {
	t.Helper()
	unseen := func() int {
		n, err := srv.Do("ZCARD", redisUnseen)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := strconv.Atoi(n)
		return c
	}
	before := unseen()
	offendLate(t, srv, box, key, func() bool { return unseen() == before+1 }, nil)
}

// offendLate makes key's offence on box while Redis is stopped (SIGSTOP)
// past the call's 300 ms deadline, and makes it again, ten times at most,
// until ran reports that Redis ran it: on a loaded machine the call may
// not be written before its deadline, and Redis then never runs it.
// before, when not nil, runs ahead of each try. It returns the tries made.
func offendLate(t *testing.T, srv *redistest.Server, box *Box, key string, ran func() bool, before func()) int {
	t.Helper()
	for try := 1; try <= 10; try++ {
		if before != nil {
			before()
		}
		srv.Pause()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		box.Outcome(ctx, key, "", "", true, policy.IdentityClientIP, 429)
		cancel()
		srv.Resume()
		for range 25 {
			if ran() {
				return try
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Fatalf("no offence of %s ran in Redis after its caller gave up waiting, in 10 tries", key)
	return 0
}

// bansHeld returns a function that reads how many bans Redis at srv holds.
func bansHeld(t *testing.T, srv *redistest.Server) func() string {
	return func() string {
		n, err := srv.Do("HLEN", redisBans)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// trimLog makes more changes than the change log keeps (lifts of keys
// never banned), through be: an instance whose version was read before
// reads every ban again.
func trimLog(t *testing.T, be *Redis) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i <= changeLog; i += 8 {
				if _, err := be.Lift(context.Background(), "flood", fmt.Sprintf("ip:10.9.%d.%d", i/256, i%256)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestLateBanCountedByFullRead: a ban Redis made after its maker gave up
// waiting is counted once when the instances that read it read every ban
// again (their version older than the change log: more than 10,000
// changes since) rather than what changed. Before, a full read claimed
// nothing, and the reads after it started past the ban: no instance
// counted it: it was left in the set of those no instance counted (until
// a ban 10,000 versions later trimmed it), and floodgate_bans_total
// summed 2 of 3 bans over the instances.
func TestLateBanCountedByFullRead(t *testing.T) {
	srv := redistest.Start(t)
	open := clientsOf(t, srv)
	r := flood
	r.After = 1
	regs := [2]*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	var boxes [2]*Box
	for i := range boxes {
		var err error
		boxes[i], err = New([]config.Ban{r}, Options{Backend: NewRedis(open(), 0), Poll: time.Hour, Registerer: regs[i]})
		if err != nil {
			t.Fatal(err)
		}
		defer boxes[i].Close()
	}
	a := boxes[0]
	counted := func() float64 {
		return promtest.Value(t, regs[0], "floodgate_bans_total", nil) + promtest.Value(t, regs[1], "floodgate_bans_total", nil)
	}
	ctx := context.Background()
	// A ban in time first: Redis has the scripts when it is stopped.
	a.Outcome(ctx, "ip:10.0.0.9", "", "", true, policy.IdentityClientIP, 429)
	lateBan(t, srv, a, "ip:10.0.0.1")

	trimLog(t, NewRedis(open(), 0))

	for _, box := range boxes {
		if err := box.refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if _, _, banned := box.Banned("ip:10.0.0.1", "", ""); !banned {
			t.Fatal("the late ban is not held after a full read")
		}
	}
	if n, _ := srv.Do("ZCARD", redisUnseen); n != "0" {
		t.Errorf("after the full reads, %s bans left that no instance counted, want 0", n)
	}
	// The reads after the full one, from the version it read.
	a.Outcome(ctx, "ip:10.0.0.2", "", "", true, policy.IdentityClientIP, 429)
	for _, box := range boxes {
		if err := box.refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := counted(); n != 3 {
		t.Errorf("floodgate_bans_total over both instances: %v, want 3 (a ban read only by full reads, two in time)", n)
	}
}

// stalledFullRead is a client that, once armed, stops its Redis (SIGSTOP)
// before it sends its next read of every ban, and resumes it once the
// read has given up: Redis runs the read, and its claims, that no one
// waits for.
type stalledFullRead struct {
	rueidis.Client
	srv   *redistest.Server
	armed atomic.Bool
}

func (s *stalledFullRead) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	full := false
	for _, cmd := range multi {
		c := cmd.Commands() // read before the call, which recycles them
		full = full || len(c) == 2 && c[0] == "HGETALL" && c[1] == redisBans
	}
	if !full || !s.armed.Swap(false) {
		return s.Client.DoMulti(ctx, multi...)
	}
	s.srv.Pause()
	defer s.srv.Resume()
	return s.Client.DoMulti(ctx, multi...)
}

// TestFullReadLateCounted: a ban Redis made after its maker gave up
// waiting, claimed by a full read whose answer did not reach the reader
// in time (Redis stopped past the read's deadline), is counted once: by
// the reader's next read, which reads from the same version.
func TestFullReadLateCounted(t *testing.T) {
	srv := redistest.Start(t)
	open := clientsOf(t, srv)
	r := flood
	r.After = 1
	stalled := &stalledFullRead{Client: open(), srv: srv}
	a, b, counted := twoBoxes(t, r, NewRedis(open(), 0), NewRedis(stalled, 0))
	ctx := context.Background()
	a.Outcome(ctx, "ip:10.0.0.9", "", "", true, policy.IdentityClientIP, 429)
	lateBan(t, srv, a, "ip:10.0.0.1")
	trimLog(t, NewRedis(open(), 0))

	// The stalled read again until Redis ran it (the client may close
	// the connection it waits on when it gives up, and the stopped Redis
	// then never reads the call), ten times at most.
	for i := 0; ; i++ {
		stalled.armed.Store(true)
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err := b.refresh(rctx)
		cancel()
		if err == nil {
			t.Fatal("the stalled full read was answered")
		}
		time.Sleep(100 * time.Millisecond) // for Redis to run it
		if n, _ := srv.Do("ZCARD", redisUnseen); n == "0" {
			break
		}
		if i == 9 {
			t.Fatal("Redis ran none of 10 reads of every ban stalled past their deadline")
		}
	}
	for _, box := range []*Box{b, a, b} {
		if err := box.refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := counted(); n != 2 {
		t.Errorf("floodgate_bans_total over both instances: %v, want 2 (a ban claimed by a full read answered late, one in time)", n)
	}
}

// TestLateBanCountedOnceWhenReadAgain: a ban Redis made after its maker
// gave up waiting, claimed by a read of the change log after which the
// instance reads every ban again (its first read, answered 3 s late,
// placed the bans off the server's clock), is counted once: the read of
// every ban counts only what the change log's read did not.
func TestLateBanCountedOnceWhenReadAgain(t *testing.T) {
	srv := redistest.Start(t)
	open := clientsOf(t, srv)
	r := flood
	r.After = 1
	reader := &countingRedis{Redis: NewRedis(&lateFirstRead{Client: open()}, 0)}
	a, b, counted := twoBoxes(t, r, NewRedis(open(), 0), reader)
	ctx := context.Background()
	a.Outcome(ctx, "ip:10.0.0.9", "", "", true, policy.IdentityClientIP, 429)
	lateBan(t, srv, a, "ip:10.0.0.1")
	if err := b.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n := reader.full.Load(); n != 2 {
		t.Fatalf("every ban read %d times, want twice (at the start, and again once the clock's estimate moved)", n)
	}
	if err := b.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n := counted(); n != 2 {
		t.Errorf("floodgate_bans_total over both instances: %v, want 2 (a ban claimed by a read followed by a full one, one in time)", n)
	}
}

// TestLateBanCountedOnceWhenReadAgainLate: a ban Redis made after its
// maker gave up waiting, claimed by a read of the changes after which the
// instance reads every ban again (its first read answered 3 s late), is
// counted once when that read of every ban gets no answer in time (Redis
// stopped past its 300 ms deadline): by the next read, from the same
// version. Before, the read of the changes counted it, and the next read,
// from the same version, counted it again: 3 of 2 bans.
func TestLateBanCountedOnceWhenReadAgainLate(t *testing.T) {
	srv := redistest.Start(t)
	open := clientsOf(t, srv)
	r := flood
	r.After = 1
	stalled := &stalledFullRead{Client: &lateFirstRead{Client: open()}, srv: srv}
	a, b, counted := twoBoxes(t, r, NewRedis(open(), 0), NewRedis(stalled, 0))
	ctx := context.Background()
	a.Outcome(ctx, "ip:10.0.0.9", "", "", true, policy.IdentityClientIP, 429)
	lateBan(t, srv, a, "ip:10.0.0.1")
	stalled.armed.Store(true)
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := b.refresh(rctx)
	cancel()
	if err == nil {
		t.Fatal("the stalled read of every ban was answered")
	}
	for range 2 {
		if err := b.refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, banned := b.Banned("ip:10.0.0.1", "", ""); !banned {
		t.Fatal("the late ban is not held")
	}
	if n := counted(); n != 2 {
		t.Errorf("floodgate_bans_total over both instances: %v, want 2 (a ban claimed by a read whose read of every ban came late, one in time)", n)
	}
}

// twoBoxes returns two boxes of rule r polling once an hour, on backends
// ea and eb, closed when t ends, and what floodgate_bans_total sums to
// over the two.
func twoBoxes(t *testing.T, r config.Ban, ea, eb Backend) (a, b *Box, counted func() float64) {
	t.Helper()
	var regs [2]*prometheus.Registry
	var boxes [2]*Box
	for i, be := range []Backend{ea, eb} {
		regs[i] = prometheus.NewRegistry()
		box, err := New([]config.Ban{r}, Options{Backend: be, Poll: time.Hour, Registerer: regs[i]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(box.Close)
		boxes[i] = box
	}
	return boxes[0], boxes[1], func() float64 {
		return promtest.Value(t, regs[0], "floodgate_bans_total", nil) + promtest.Value(t, regs[1], "floodgate_bans_total", nil)
	}
}

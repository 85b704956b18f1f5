package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestLateRefundGivesBackOnce: on a Cluster, the refund of an earlier
// slot's charge that is still unanswered when its request's deadline
// passes (the node is slow, or this process read the answer late) gives
// the charge back once: the refund was sent and Redis applies it, so it
// is not sent a second time.
func TestLateRefundGivesBackOnce(t *testing.T) {
	lateRefund(t, newCluster(t), 200*time.Millisecond)
}

// TestLateRefundLoggedAsApplied: a refund that Redis applies after the
// request's deadline, and after a second, is logged as applied late, not
// as failed: before, such a refund was logged "refund failed; the charge
// stays until its window passes" and counted in RefundErrors, though the
// charge was given back.
func TestLateRefundLoggedAsApplied(t *testing.T) {
	var logs syncBuffer
	s := newClusterWith(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	lateRefund(t, s, 2*time.Second)
	if out := logs.String(); strings.Contains(out, "refund failed") || strings.Contains(out, "refund unanswered") ||
		!strings.Contains(out, "refund applied late") {
		t.Errorf("a refund applied late is logged:\n%s", out)
	}
	if n := s.RefundErrors(); n != 0 {
		t.Errorf("%d refund errors counted for a refund applied late, want 0", n)
	}
}

// subjectsOnTwoNodes returns a subject of ra and one of rb whose keys are
// on two different primaries of c, and those primaries.
func subjectsOnTwoNodes(t *testing.T, s *Store, c *redistest.Cluster, ra, rb *limiter.Rule) (a, b string, na, nb *redistest.Server) {
	t.Helper()
	for i := range 200 {
		a, b = fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
		pa, err := c.PrimaryOf(int(slot(s.Key(ra, a))))
		if err != nil {
			t.Fatal(err)
		}
		pb, err := c.PrimaryOf(int(slot(s.Key(rb, b))))
		if err != nil {
			t.Fatal(err)
		}
		if pa != pb {
			return a, b, pa, pb
		}
	}
	t.Fatal("no two subjects on two nodes")
	return
}

// lateRefund runs on s, a Cluster store, a request charged in one slot and
// denied in another, whose refund in the first is answered after the
// request's 1 s deadline, hold after it; it checks that the charge was
// given back once.
func lateRefund(t *testing.T, s *Store, hold time.Duration) {
	t.Helper()
	c := sharedCluster(t)
	ctx := context.Background()
	tb := ruletest.Rule(t, floodgate.Limit{Name: "late_refund_tb", Algorithm: floodgate.TokenBucket, Rate: 1,
		Per: time.Hour, Burst: 10})
	fw := ruletest.Rule(t, floodgate.Limit{Name: "late_refund_fw", Algorithm: floodgate.FixedWindow, Max: 1,
		Window: 1000 * time.Hour})
	// Two subjects on two nodes.
	a, b, na, nb := subjectsOnTwoNodes(t, s, c, tb, fw)
	free := func() int64 {
		t.Helper()
		out := make([]floodgate.Decision, 1)
		if err := s.Decide(ctx, []limiter.Hit{{Rule: tb, Key: a, Cost: 1}}, true, out); err != nil {
			t.Fatal(err)
		}
		if !out[0].Allowed {
			return 0
		}
		return out[0].Remaining + 1
	}
	// 5 of the bucket's 10 taken; the window's one unit taken.
	if err := s.Decide(ctx, []limiter.Hit{{Rule: tb, Key: a, Cost: 5}, {Rule: fw, Key: b, Cost: 1}}, false,
		make([]floodgate.Decision, 2)); err != nil {
		t.Fatal(err)
	}
	// A request the window denies: its charge of a is given back, and the
	// refund script is loaded on a's node.
	if err := s.Decide(ctx, []limiter.Hit{{Rule: tb, Key: a, Cost: 1}, {Rule: fw, Key: b, Cost: 1}}, false,
		make([]floodgate.Decision, 2)); err != nil {
		t.Fatal(err)
	}
	if n := free(); n != 5 {
		t.Fatalf("%d free before the request, want 5", n)
	}

	// The request charges a on its node, then waits for b's node, which
	// denies once it runs again; by then a's node is stopped, so that the
	// refund is answered only after the request's deadline.
	nb.Pause()
	resumed := false
	defer func() {
		if !resumed {
			na.Resume()
			nb.Resume()
		}
	}()
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	errc := make(chan error, 1)
	out := make([]floodgate.Decision, 2)
	go func() {
		errc <- s.Decide(rctx, []limiter.Hit{{Rule: tb, Key: a, Cost: 1}, {Rule: fw, Key: b, Cost: 1}}, false, out)
	}()
	time.Sleep(300 * time.Millisecond) // a is charged; b's call waits
	na.Pause()
	nb.Resume()
	err := <-errc
	time.Sleep(hold) // past the deadline: the refund is late
	na.Resume()
	resumed = true
	s.Flush()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	if err == nil && (out[0].Allowed && out[1].Allowed) {
		t.Fatalf("a denied window admitted: %+v", out)
	}
	if n := free(); n != 5 {
		t.Fatalf("%d free after a request denied by its other slot, want 5 (its charge given back once)", n)
	}
}

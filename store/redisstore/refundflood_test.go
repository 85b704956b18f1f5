package redisstore

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestRefundsWaitingForANodeAreBounded: on a Cluster whose node stops
// answering, the refunds of requests charged there and denied by another
// node each wait up to refundTimeout, past their requests' deadlines, on
// a goroutine of their own; a flood of such requests (clients that ask
// for what the other node denies) must not hold a goroutine per request
// for that long: at most maxRefunds wait past their requests, and the
// refunds past them are not sent (counted in RefundErrors), so that they
// hold neither a goroutine nor their requests.
func TestRefundsWaitingForANodeAreBounded(t *testing.T) {
	s := newCluster(t)
	c := sharedCluster(t)
	ctx := context.Background()
	tb := ruletest.Rule(t, floodgate.Limit{Name: "flood_refund_tb", Algorithm: floodgate.TokenBucket, Rate: 1000,
		Per: time.Second, Burst: 100000})
	fw := ruletest.Rule(t, floodgate.Limit{Name: "flood_refund_fw", Algorithm: floodgate.FixedWindow, Max: 1,
		Window: 1000 * time.Hour})
	a, b, na, nb := subjectsOnTwoNodes(t, s, c, tb, fw)
	// The window's one unit taken; a denied request loads the refund
	// script on a's node.
	for range 2 {
		if err := s.Decide(ctx, []limiter.Hit{{Rule: tb, Key: a, Cost: 1}, {Rule: fw, Key: b, Cost: 1}}, false,
			make([]floodgate.Decision, 2)); err != nil {
			t.Fatal(err)
		}
	}
	base := runtime.NumGoroutine()
	// The requests charge a, then wait for b's node; a's node stops before
	// b's denies, so their refunds wait for a's.
	const requests = maxRefunds + 512
	nb.Pause()
	resumed := false
	defer func() {
		if !resumed {
			na.Resume()
			nb.Resume()
		}
	}()
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.Decide(rctx, []limiter.Hit{{Rule: tb, Key: a, Cost: 1}, {Rule: fw, Key: b, Cost: 1}}, false,
				make([]floodgate.Decision, 2))
		}()
	}
	time.Sleep(time.Second) // a is charged; b's calls wait
	na.Pause()
	nb.Resume()
	wg.Wait() // every request ended, at its deadline at the latest
	waiting := runtime.NumGoroutine() - base
	na.Resume()
	resumed = true
	s.Flush()
	if waiting > maxRefunds+64 {
		t.Errorf("%d requests denied while their refunds' node stopped left %d goroutines waiting past them, want at most about %d",
			requests, waiting, maxRefunds)
	}
	if n := s.RefundErrors(); n < requests-maxRefunds {
		t.Errorf("%d refund errors counted, want at least the %d refunds past maxRefunds", n, requests-maxRefunds)
	}
}

package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// BenchmarkCheck is a two-hit check through the engine with a memstore.
func BenchmarkCheck(b *testing.B) {
	l := limiter.New(newMem(b), limiter.Options{})
	hits := []limiter.Hit{
		{Rule: bucket(b, "user", 1<<16, floodgate.FailOpen), Key: "u", Cost: 1},
		{Rule: window(b, "global", 1<<50, floodgate.FailOpen), Key: "g", Cost: 1},
	}
	req := limiter.Request{Hits: hits}
	var r limiter.Result
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Decide(context.Background(), &req, &r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckDegraded is the same check while the store fails and the
// breaker is open: FailLocal and FailOpen decide without the store.
func BenchmarkCheckDegraded(b *testing.B) {
	ts := &testStore{inner: newMem(b)}
	ts.fail.Store(true)
	l := limiter.New(ts, limiter.Options{Local: newMem(b), Instances: 3})
	hits := []limiter.Hit{
		{Rule: bucket(b, "user", 1<<16, floodgate.FailLocal), Key: "u", Cost: 1},
		{Rule: window(b, "global", 1<<50, floodgate.FailOpen), Key: "g", Cost: 1},
	}
	req := limiter.Request{Hits: hits}
	var r limiter.Result
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Decide(context.Background(), &req, &r); err != nil {
			b.Fatal(err)
		}
		if r.Degraded == limiter.NotDegraded {
			b.Fatal("not degraded")
		}
	}
}

// reserveHits are the hits of BenchmarkReserveSettle and
// BenchmarkCheckAllowed: a token bucket that never runs out (the one
// reserved) and a window.
func reserveHits(b *testing.B) []limiter.Hit {
	tb := ruletest.Rule(b, floodgate.Limit{Name: "tokens", Algorithm: floodgate.TokenBucket, Rate: 1 << 20, Per: time.Second, Burst: 1 << 30})
	return []limiter.Hit{
		{Rule: tb, Key: "u", Cost: 2},
		{Rule: window(b, "global", 1<<50, floodgate.FailOpen), Key: "g", Cost: 1},
	}
}

// BenchmarkCheckAllowed is a two-hit check that always allows: one plain
// decision, the unit of BenchmarkReserveSettle.
func BenchmarkCheckAllowed(b *testing.B) {
	l := limiter.New(newMem(b), limiter.Options{})
	req := limiter.Request{Hits: reserveHits(b)}
	var r limiter.Result
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Decide(ctx, &req, &r); err != nil || !r.Allowed {
			b.Fatal(err, r.Allowed)
		}
	}
}

// BenchmarkReserveSettle reserves the hits of BenchmarkCheckAllowed (the
// bucket's as a reservation) and settles the reservation below its
// estimate: the two calls of a request whose cost is known later. The goal
// is at most twice BenchmarkCheckAllowed.
func BenchmarkReserveSettle(b *testing.B) {
	l := limiter.New(newMem(b), limiter.Options{})
	hits := reserveHits(b)
	hits[0].Reserve = true
	actual := []int64{1, 0}
	var req limiter.Request
	var r limiter.Result
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		req = limiter.Request{Hits: hits}
		if err := l.Decide(ctx, &req, &r); err != nil || !r.Allowed {
			b.Fatal(err, r.Allowed)
		}
		if err := l.Settle(ctx, &req, actual, &r); err != nil {
			b.Fatal(err)
		}
	}
}

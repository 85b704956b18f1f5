package limiter_test

import (
	"context"
	"testing"

	"github.com/floodgate/floodgate"
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

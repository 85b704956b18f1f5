package limiter_test

import (
	"context"
	"errors"
	"testing"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// decideOnly is a store that implements Store and nothing else.
type decideOnly struct{ s limiter.Store }

func (d decideOnly) Decide(ctx context.Context, hits []limiter.Hit, peek bool, out []floodgate.Decision) error {
	return d.s.Decide(ctx, hits, peek, out)
}

// TestDecideOnlyStore: a store that implements only Store takes every
// limit but concurrency, which Decide refuses with ErrUnsupported before
// the store is asked; a Refund gives nothing back and Release has nothing
// to do.
func TestDecideOnlyStore(t *testing.T) {
	t.Parallel()
	ts := &testStore{inner: decideOnly{newMem(t)}}
	l := limiter.New(decideOnly{ts}, limiter.Options{})
	w := bucket(t, "b", 3, floodgate.FailOpen)
	conc := ruletest.Rule(t, floodgate.Limit{Name: "c", Algorithm: floodgate.Concurrency, Max: 2})
	if r := check(t, l, limiter.Hit{Rule: w, Key: "k", Cost: 2}); !r.Allowed {
		t.Fatalf("%+v", r)
	}
	before := ts.calls.Load()
	hits := []limiter.Hit{{Rule: w, Key: "k", Cost: 1}, {Rule: conc, Key: "k", Cost: 1}}
	if _, err := l.Check(context.Background(), hits); !errors.Is(err, limiter.ErrUnsupported) {
		t.Fatalf("a concurrency limit: %v, want ErrUnsupported", err)
	}
	if err := l.Refund(context.Background(), hits[:1]); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background(), hits[:1]); err != nil {
		t.Fatal(err)
	}
	if n := ts.calls.Load(); n != before {
		t.Fatalf("%d store calls for a refused request, a refund and a release, want none", n-before)
	}
	if r, _ := l.Peek(context.Background(), hits[:1]); r.Decisions[0].Remaining != 0 {
		t.Fatalf("after the refund: %+v, want the charge kept (0 left after a peek of 1)", r.Decisions[0])
	}
}

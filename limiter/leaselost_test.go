package limiter_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestRenewAfterTheLeaseExpired follows a request in flight whose
// concurrency leases expired before a renewal reached the store (an
// outage longer than lease_ttl, played by the store's clock moving on):
// a renewal takes a free slot again under the same lease; it reports a
// slot another request took meanwhile as lost (ErrLeaseLost, naming the
// hit), and it still renews the request's other leases, though a charge
// is all or nothing.
func TestRenewAfterTheLeaseExpired(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	ctx := context.Background()
	store, now := clockStore(t)
	l := limiter.New(store, limiter.Options{})
	one := ruletest.Rule(t, floodgate.Limit{Name: "one", Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: ttl})
	other := ruletest.Rule(t, floodgate.Limit{Name: "other", Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: ttl})
	win := window(t, "window", 100, floodgate.FailOpen)
	a := []limiter.Hit{{Rule: win, Key: "k", Cost: 1}, {Rule: one, Key: "k", Cost: 1}, {Rule: other, Key: "k", Cost: 1}}
	if r := check(t, l, a...); !r.Allowed {
		t.Fatalf("first request: %+v", r)
	}
	refused := func(rule *limiter.Rule) bool {
		t.Helper()
		h := []limiter.Hit{{Rule: rule, Key: "k", Cost: 1}}
		r := check(t, l, h...)
		if r.Allowed {
			if err := l.Release(ctx, h); err != nil {
				t.Fatal(err)
			}
		}
		return !r.Allowed
	}

	// The leases expire; nobody takes the slots: the renewal takes them again.
	now.Add(int64(2 * ttl))
	if err := l.Renew(ctx, a); err != nil {
		t.Fatalf("renewal of expired leases whose slots are free: %v", err)
	}
	if !refused(one) || !refused(other) {
		t.Fatal("after the renewal the slots are free: it did not take them again")
	}

	// They expire again, and another request takes the slot of "one".
	now.Add(int64(2 * ttl))
	b := []limiter.Hit{{Rule: one, Key: "k", Cost: 1}}
	if r := check(t, l, b...); !r.Allowed {
		t.Fatalf("a request after the first's leases expired: %+v", r)
	}
	err := l.Renew(ctx, a)
	lost, ok := errors.AsType[*limiter.LeaseLostError](err)
	if !ok || !errors.Is(err, limiter.ErrLeaseLost) || !slices.Equal(lost.Lost, []int{1}) {
		t.Fatalf("renewal of a lease whose slot was taken: %v (%#v), want a LeaseLostError naming hit 1", err, lost)
	}
	// The lease of "other" was renewed all the same: held half a lifetime on.
	now.Add(int64(ttl / 2))
	if !refused(other) {
		t.Error("the renewal that lost one lease let the request's other lease expire")
	}
	// Once the slot is free again, the next renewal takes it.
	if err := l.Release(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx, a); err != nil {
		t.Fatalf("renewal once the slot is free: %v", err)
	}
	if !refused(one) {
		t.Error("the renewal did not take the freed slot again")
	}
}

package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestReservationFloodSparesTheNewest: a flood of reservations that are
// never settled (requests that reserve and hang, from many clients) fills
// a shard's share of MaxReservations; honest reservations made after it
// are then settled while the flood goes on. A full shard drops a record
// past its TTL first, else the oldest, so the flood's older records go
// before the honest ones, whatever ttl the flood asked for: every honest
// reservation settles at its actual cost, and an expired record is
// dropped before a live one. Before, a full shard dropped any record: 512 more reservations
// of the flood made 26 to 39 of 100 honest ones settle at their estimates
// (a reserved concurrency slot then stays held until its lease expires).
func TestReservationFloodSparesTheNewest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &clock{ns: 1000 * sec}
	const share = 1024
	var s *memstore.Store // each part's own (reserve's)
	r, err := limiter.NewRule(floodgate.Limit{Name: "tokens", Algorithm: floodgate.FixedWindow, Max: 1 << 40, Window: 24 * time.Hour}, floodgate.FailOpen, false)
	if err != nil {
		t.Fatal(err)
	}
	lease := uint64(0)
	reserve := func(key string, cost int64, ttl time.Duration) limiter.Hit {
		t.Helper()
		lease++
		h := limiter.Hit{Rule: r, Key: key, Cost: cost, Lease: lease, Reserve: true, TTL: ttl}
		out := make([]floodgate.Decision, 1)
		if err := s.Reserve(ctx, []limiter.Hit{h}, out); err != nil || !out[0].Allowed {
			t.Fatalf("reserve %s: %+v %v", key, out[0], err)
		}
		return h
	}
	// The flood: a full share of reservations, one client each, asking
	// for the honest ones' ttl, then for a day, the longest: a record
	// that expires first would then be the newest honest one.
	const honest, estimate, actual = 100, 500, 20
	for _, floodTTL := range []time.Duration{5 * time.Minute, 24 * time.Hour} {
		s = newStore(t, memstore.Options{Shards: 1, MaxReservations: share, Now: c.now, SweepInterval: -1}) // reserve's store
		for i := range share {
			reserve(fmt.Sprint("flood", i), 1, floodTTL)
		}
		c.ns += 10 * sec
		var kept []limiter.Hit
		for i := range honest {
			kept = append(kept, reserve(fmt.Sprint("user", i), estimate, 5*time.Minute))
		}
		c.ns += sec
		for i := range share / 2 {
			reserve(fmt.Sprint("more", i), 1, floodTTL)
		}
		lost := 0
		for _, h := range kept {
			h.Cost = actual
			out := make([]limiter.Settled, 1)
			if err := s.Settle(ctx, []limiter.Hit{h}, out); err != nil {
				t.Fatal(err)
			}
			if !out[0].Found {
				lost++
			}
		}
		if lost > 0 {
			t.Errorf("a flood of ttl %v: %d of %d honest reservations made after it were dropped by %d more of it; want none (the flood's older records first)",
				floodTTL, lost, honest, share/2)
		}
	}

	// A share full of records past their TTL (not swept yet) and one
	// live reservation: new ones drop the expired records, never the
	// live one.
	s = newStore(t, memstore.Options{Shards: 1, MaxReservations: share, Now: c.now, SweepInterval: -1}) // reserve's store
	live := reserve("live", estimate, 5*time.Minute)
	for i := range share - 1 {
		reserve(fmt.Sprint("short", i), 1, time.Second)
	}
	c.ns += 2 * sec
	for i := range share - 1 {
		reserve(fmt.Sprint("next", i), 1, time.Minute)
	}
	if st := s.Stats(); st.ReservationEvictions != 0 || st.Reservations != share {
		t.Errorf("%d expired records replaced: %d live ones evicted, %d held; want 0 and %d", share-1, st.ReservationEvictions, st.Reservations, share)
	}
	live.Cost = actual
	out := make([]limiter.Settled, 1)
	if err := s.Settle(ctx, []limiter.Hit{live}, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Found {
		t.Errorf("a live reservation was dropped from a share holding %d expired records", share-1)
	}
}

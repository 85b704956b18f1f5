package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestFullReservationTable: more reservations in flight on one shard than
// its share of MaxReservations drops one of the shard's reservations for
// each one past the share, counted in Stats().ReservationEvictions; a dropped reservation settles at its
// estimate (its settle is not found and gives nothing back), while the
// ones kept settle at their actual cost, so the limit is never charged
// less than what the kept ones used plus the dropped ones' estimates.
func TestFullReservationTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, err := limiter.NewRule(floodgate.Limit{Name: "tokens", Algorithm: floodgate.FixedWindow, Max: 1000, Window: 24 * time.Hour}, floodgate.FailOpen, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		shards, max, share int
	}{{1, 4, 4}, {4, 8, 2}} {
		t.Run(fmt.Sprintf("%d shards, %d reservations", c.shards, c.max), func(t *testing.T) {
			s := newStore(t, memstore.Options{Shards: c.shards, MaxReservations: c.max})
			const n, estimate, actual = 7, 50, 3
			hits := make([]limiter.Hit, n)
			for i := range hits {
				hits[i] = limiter.Hit{Rule: r, Key: "org:acme", Cost: estimate, Lease: uint64(0x100 + i), Reserve: true, TTL: time.Hour}
				out := make([]floodgate.Decision, 1)
				if err := s.Reserve(ctx, hits[i:i+1], out); err != nil || !out[0].Allowed {
					t.Fatalf("reserve %d: %+v %v", i, out[0], err)
				}
			}
			dropped := n - c.share
			st := s.Stats()
			if st.Reservations != c.share || st.ReservationEvictions != uint64(dropped) {
				t.Fatalf("after %d reservations on one key: %d held, %d dropped; want %d and %d", n, st.Reservations, st.ReservationEvictions, c.share, dropped)
			}
			found := 0
			for i := range hits {
				h := hits[i]
				h.Cost = actual
				out := make([]limiter.Settled, 1)
				if err := s.Settle(ctx, []limiter.Hit{h}, out); err != nil {
					t.Fatal(err)
				}
				if out[0].Found {
					found++
				} else if out[0] != (limiter.Settled{}) {
					t.Errorf("settle of a dropped reservation: %+v, want nothing", out[0])
				}
			}
			if found != c.share {
				t.Errorf("%d settles found their reservation, want %d", found, c.share)
			}
			peek := []limiter.Hit{{Rule: r, Key: "org:acme", Cost: 1}}
			out := make([]floodgate.Decision, 1)
			if err := s.Decide(ctx, peek, true, out); err != nil {
				t.Fatal(err)
			}
			if used, want := 1000-(out[0].Remaining+1), int64(c.share*actual+dropped*estimate); used != want {
				t.Errorf("used after the settles: %d, want %d (%d settled at %d, %d dropped at their estimate of %d)", used, want, c.share, actual, dropped, estimate)
			}
			if st := s.Stats(); st.Reservations != 0 || st.ReservationEvictions != uint64(dropped) {
				t.Errorf("after the settles: %d held, %d dropped", st.Reservations, st.ReservationEvictions)
			}
		})
	}
}

// TestReserveBesideAGroup reserves a hit beside a group of hits of which
// one denies and one allows: the request goes ahead (one hit of the group
// is enough), so the reservation is charged and must be kept to settle.
func TestReserveBesideAGroup(t *testing.T) {
	t.Parallel()
	s := newStore(t, memstore.Options{SweepInterval: -1})
	ctx := context.Background()
	tokens := ruletest.Rule(t, floodgate.Limit{Name: "tokens", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
	full := ruletest.Rule(t, floodgate.Limit{Name: "full", Algorithm: floodgate.FixedWindow, Max: 1, Window: time.Hour})
	open := ruletest.Rule(t, floodgate.Limit{Name: "open", Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Hour})
	charge(t, s, limiter.Hit{Rule: full, Key: "q", Cost: 1})
	hits := []limiter.Hit{
		{Rule: tokens, Key: "k", Cost: 40, Reserve: true, Lease: 7, TTL: time.Hour},
		{Rule: full, Key: "q", Cost: 1, Group: 1},
		{Rule: open, Key: "q", Cost: 1, Group: 1},
	}
	out := make([]floodgate.Decision, len(hits))
	if err := s.Reserve(ctx, hits, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed || out[1].Allowed || !out[2].Allowed {
		t.Fatalf("%+v, want the reservation and the group's open hit allowed", out)
	}
	if got := used(t, s, tokens, "k"); got != 40 {
		t.Fatalf("%d reserved, want 40", got)
	}
	settled := make([]limiter.Settled, 1)
	if err := s.Settle(ctx, []limiter.Hit{{Rule: tokens, Key: "k", Cost: 10, Reserve: true, Lease: 7}}, settled); err != nil {
		t.Fatal(err)
	}
	if !settled[0].Found || used(t, s, tokens, "k") != 10 {
		t.Fatalf("settle at 10: %+v, %d used; want the reservation found and 10 used", settled[0], used(t, s, tokens, "k"))
	}
}

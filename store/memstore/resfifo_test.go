package memstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// TestReservationQueuesStayBounded: reservations settled one after
// another, never filling the table, leave entries in the queues that
// order the records; both queues are rebuilt from the records before
// they hold more than about two entries for each record held.
func TestReservationQueuesStayBounded(t *testing.T) {
	ctx := context.Background()
	s, err := New(Options{Shards: 1, MaxReservations: 1 << 10, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := limiter.NewRule(floodgate.Limit{Name: "tokens", Algorithm: floodgate.FixedWindow, Max: 1 << 40, Window: time.Hour}, floodgate.FailOpen, false)
	if err != nil {
		t.Fatal(err)
	}
	held := make([]limiter.Hit, 0, 8)
	for i := range 20000 {
		h := limiter.Hit{Rule: r, Key: fmt.Sprint("k", i%100), Cost: 1, Lease: uint64(i + 1), Reserve: true, TTL: time.Minute}
		out := make([]floodgate.Decision, 1)
		if err := s.Reserve(ctx, []limiter.Hit{h}, out); err != nil || !out[0].Allowed {
			t.Fatalf("reserve %d: %+v %v", i, out[0], err)
		}
		held = append(held, h)
		if len(held) == cap(held) {
			for _, h := range held {
				if err := s.Settle(ctx, []limiter.Hit{h}, make([]limiter.Settled, 1)); err != nil {
					t.Fatal(err)
				}
			}
			held = held[:0]
		}
		sh := &s.shards[0]
		sh.mu.Lock()
		n, fifo, due := len(sh.res), len(sh.resMade.q), len(sh.resDue)
		sh.mu.Unlock()
		// At most 8 records held at once: each queue is rebuilt by the
		// add that finds it holding 2*8+64 entries.
		if fifo > 2*8+64+1 || due > 2*8+64+1 {
			t.Fatalf("after %d reservations, %d held: %d entries in order of making, %d in order of expiry", i+1, n, fifo, due)
		}
	}
}

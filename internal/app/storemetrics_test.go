package app

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestReservationEvictionsInMetrics: reservations the embedded store
// drops to keep within its table are counted in /metrics, not only in its
// Stats.
func TestReservationEvictionsInMetrics(t *testing.T) {
	t.Parallel()
	s, err := memstore.New(memstore.Options{Shards: 1, MaxReservations: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	reg := prometheus.NewRegistry()
	eng := limiter.New(s, limiter.Options{})
	if err := register(reg, stateMetrics(eng, s, nil)); err != nil {
		t.Fatal(err)
	}
	r := ruletest.Rule(t, floodgate.Limit{Name: "tokens", Algorithm: floodgate.FixedWindow, Max: 1000, Window: time.Hour})
	for i := range 5 {
		out := make([]floodgate.Decision, 1)
		hit := limiter.Hit{Rule: r, Key: "org", Cost: 10, Lease: uint64(i + 1), Reserve: true, TTL: time.Hour}
		if err := s.Reserve(context.Background(), []limiter.Hit{hit}, out); err != nil || !out[0].Allowed {
			t.Fatalf("reserve %d: %+v %v", i, out[0], err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "floodgate_store_reservation_evictions_total" {
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 3 {
				t.Fatalf("floodgate_store_reservation_evictions_total = %v after 5 reservations in a table of 2, want 3", v)
			}
			return
		}
	}
	t.Fatal("no floodgate_store_reservation_evictions_total")
}

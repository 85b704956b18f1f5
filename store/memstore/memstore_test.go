package memstore_test

import (
	"testing"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
	"github.com/floodgate/floodgate/store/storetest"
)

// newStore returns a store closed at the end of the test.
func newStore(t testing.TB, opts memstore.Options) *memstore.Store {
	t.Helper()
	s, err := memstore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) limiter.Store { return newStore(t, memstore.Options{}) })
}

func TestConformanceReservations(t *testing.T) {
	storetest.RunReservations(t, func(t *testing.T) limiter.Store { return newStore(t, memstore.Options{}) })
	s := newStore(t, memstore.Options{Shards: 2})
	t.Run("SharedSmallShards", func(t *testing.T) {
		storetest.RunReservations(t, func(t *testing.T) limiter.Store { return s })
	})
}

func TestConformanceSharedSmallShards(t *testing.T) {
	t.Parallel()
	// One store for every subtest, two shards: many keys share a shard.
	s := newStore(t, memstore.Options{Shards: 2})
	storetest.Run(t, func(t *testing.T) limiter.Store { return s })
}

// decideOnly shows only Store.Decide of its store: a store with none of
// the optional verbs.
type decideOnly struct{ limiter.Store }

// TestConformanceDecideOnly: the suite holds a store that implements only
// Decide to what it does, and leaves out the subtests of the verbs it
// lacks.
func TestConformanceDecideOnly(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) limiter.Store { return decideOnly{newStore(t, memstore.Options{})} })
}

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

// The conformance suites run on the suite's clock (Options.Now): where a
// test waits for a window's end, the clock is moved on instead. The
// default clock is the subject of the package's own tests.

// clocked is the store of opts, closed at the end of the test, on c.
func clocked(t *testing.T, c *storetest.Clock, opts memstore.Options) *memstore.Store {
	opts.Now = c.Now
	return newStore(t, opts)
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.RunClocked(t, func(t *testing.T, c *storetest.Clock) limiter.Store { return clocked(t, c, memstore.Options{}) })
}

func TestConformanceReservations(t *testing.T) {
	storetest.RunReservationsClocked(t, func(t *testing.T, c *storetest.Clock) limiter.Store {
		return clocked(t, c, memstore.Options{})
	})
	t.Run("SharedSmallShards", func(t *testing.T) {
		var s *memstore.Store // made by the suite's first call, with t
		storetest.RunReservationsClocked(t, func(t *testing.T, c *storetest.Clock) limiter.Store {
			if s == nil {
				s = clocked(t, c, memstore.Options{Shards: 2})
			}
			return s
		})
	})
}

func TestConformanceSharedSmallShards(t *testing.T) {
	t.Parallel()
	// One store for every subtest, two shards: many keys share a shard.
	// The suite's first call of newStore is with t.
	var s *memstore.Store
	storetest.RunClocked(t, func(t *testing.T, c *storetest.Clock) limiter.Store {
		if s == nil {
			s = clocked(t, c, memstore.Options{Shards: 2})
		}
		return s
	})
}

// decideOnly shows only Store.Decide of its store: a store with none of
// the optional verbs.
type decideOnly struct{ limiter.Store }

// TestConformanceDecideOnly: the suite holds a store that implements only
// Decide to what it does, and leaves out the subtests of the verbs it
// lacks.
func TestConformanceDecideOnly(t *testing.T) {
	t.Parallel()
	storetest.RunClocked(t, func(t *testing.T, c *storetest.Clock) limiter.Store {
		return decideOnly{clocked(t, c, memstore.Options{})}
	})
}

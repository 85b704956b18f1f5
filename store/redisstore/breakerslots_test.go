package redisstore

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestStoppedNodeWithMostTrafficCostsOnlyItsSlots: a stopped Cluster
// primary costs only its own slots (docs/promises.md), also when it holds
// the key most requests name. Requests come at a steady pace whatever
// their answers (as a server's clients send them): four in five name a
// subject on the primary that is stopped, one in five a subject on
// another primary. The decisions on the healthy primary must all be made
// by Redis.
func TestStoppedNodeWithMostTrafficCostsOnlyItsSlots(t *testing.T) {
	c, s, lim := stoppableCluster(t)
	r := ruletest.With(t, floodgate.Limit{Name: "hot", Algorithm: floodgate.FixedWindow, Max: 1 << 40, Window: time.Hour},
		limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	victim, err := c.PrimaryOf(int(slot(s.Key(r, "s0"))))
	if err != nil {
		t.Fatal(err)
	}
	onVictim, elsewhere := "s0", ""
	for i := 1; elsewhere == ""; i++ {
		key := "s" + itoa(int64(i))
		if node, err := c.PrimaryOf(int(slot(s.Key(r, key)))); err != nil {
			t.Fatal(err)
		} else if node != victim {
			elsewhere = key
		}
	}
	decide := func(key string) (bool, limiter.Degradation, error) {
		res, err := lim.Check(context.Background(), []limiter.Hit{{Rule: r, Key: key, Cost: 1}})
		return err != nil || res.Degraded != limiter.NotDegraded, res.Degraded, err
	}
	// Both answer while the cluster is healthy.
	for _, k := range []string{onVictim, elsewhere} {
		if deg, why, err := decide(k); deg {
			t.Fatalf("%s degraded before the fault: %v %v", k, why, err)
		}
	}

	victim.Pause()
	defer victim.Resume()
	var (
		wg                sync.WaitGroup
		healthy, degraded atomic.Int64
		refused           atomic.Int64 // of degraded, by an open breaker
		firstWhy          atomic.Value
		victimDecided     atomic.Int64
	)
	// 3 s of traffic: 200 requests a second on the stopped primary, 50 on
	// a healthy one.
	end := time.Now().Add(3 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for n := 0; time.Now().Before(end); n++ {
		<-tick.C
		key := onVictim
		if n%5 == 4 {
			key = elsewhere
		}
		wg.Go(func() {
			deg, why, _ := decide(key)
			if key == onVictim {
				victimDecided.Add(1)
				return
			}
			healthy.Add(1)
			if deg {
				if degraded.Add(1) == 1 {
					firstWhy.Store(why)
				}
				if why == limiter.DegradedBreakerOpen {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	victim.Resume()
	t.Logf("on the stopped primary: %d decisions; on the healthy one: %d, %d of them degraded (first: %v); %+v",
		victimDecided.Load(), healthy.Load(), degraded.Load(), firstWhy.Load(), lim.Stats())
	// An open breaker is what the stopped node must not cost the others
	// (a loaded machine may make a healthy call late on its own).
	if refused.Load() != 0 {
		t.Fatalf("%d of %d decisions on a healthy primary were refused the store by an open breaker (%d degraded in all, first: %v); want none: a stopped node costs only its own slots",
			refused.Load(), healthy.Load(), degraded.Load(), firstWhy.Load())
	}
}

// TestStoppedNodeCostsSpanningCallsOnlyItsSlots: a request whose limits
// name keys on several Cluster primaries (per address, per API key) is
// judged by the breakers of the primaries it touches. With one primary
// stopped, the requests that touch it fail, then are refused by its open
// breaker, and are decided by the store again once it is resumed; those
// whose keys are all on the two healthy primaries, one of them shared
// with the failing requests, are all decided by Redis, never refused by
// an open breaker.
func TestStoppedNodeCostsSpanningCallsOnlyItsSlots(t *testing.T) {
	c, s, lim := stoppableCluster(t)
	limit := func(name string) *limiter.Rule {
		return ruletest.With(t, floodgate.Limit{Name: name, Algorithm: floodgate.FixedWindow, Max: 1 << 40, Window: time.Hour},
			limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	}
	perIP, perKey := limit("ip"), limit("key")
	primaries, err := c.Primaries()
	if err != nil {
		t.Fatal(err)
	}
	// A subject for each primary, under either limit.
	on := map[*redistest.Server]string{}
	for i := 0; len(on) < len(primaries); i++ {
		key := "s" + itoa(int64(i))
		a, err := c.PrimaryOf(int(slot(s.Key(perIP, key))))
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.PrimaryOf(int(slot(s.Key(perKey, key))))
		if err != nil {
			t.Fatal(err)
		}
		if a == b && on[a] == "" {
			on[a] = key
		}
	}
	victim, shared, other := primaries[0], primaries[1], primaries[2]
	healthyHits := []limiter.Hit{{Rule: perIP, Key: on[shared], Cost: 1}, {Rule: perKey, Key: on[other], Cost: 1}}
	victimHits := []limiter.Hit{{Rule: perIP, Key: on[shared], Cost: 1}, {Rule: perKey, Key: on[victim], Cost: 1}}
	decide := func(hits []limiter.Hit) limiter.Degradation {
		res, err := lim.Check(context.Background(), slices.Clone(hits))
		if err != nil {
			t.Error(err)
		}
		return res.Degraded
	}
	for _, hits := range [][]limiter.Hit{healthyHits, victimHits} {
		if why := decide(hits); why != limiter.NotDegraded {
			t.Fatalf("%s and %s degraded before the fault: %v", hits[0].Key, hits[1].Key, why)
		}
	}

	victim.Pause()
	defer victim.Resume()
	var (
		wg                         sync.WaitGroup
		healthy, degraded, refused atomic.Int64 // refused: by an open breaker
		firstWhy                   atomic.Value
		onVictim, victimRefused    atomic.Int64
	)
	// 3 s of traffic at a steady pace whatever the answers: 200 requests
	// a second, two in three touching the stopped primary.
	end := time.Now().Add(3 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for n := 0; time.Now().Before(end); n++ {
		<-tick.C
		toVictim := n%3 != 2
		wg.Go(func() {
			if toVictim {
				onVictim.Add(1)
				if decide(victimHits) == limiter.DegradedBreakerOpen {
					victimRefused.Add(1)
				}
				return
			}
			healthy.Add(1)
			if why := decide(healthyHits); why != limiter.NotDegraded {
				if degraded.Add(1) == 1 {
					firstWhy.Store(why)
				}
				if why == limiter.DegradedBreakerOpen {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	st := lim.Stats()
	victim.Resume()
	t.Logf("touching the stopped primary: %d requests, %d refused by an open breaker; on the healthy ones: %d, %d degraded (first: %v); %+v",
		onVictim.Load(), victimRefused.Load(), healthy.Load(), degraded.Load(), firstWhy.Load(), st)
	// An open breaker is what the stopped node must not cost the others
	// (a loaded machine may make a healthy call late on its own).
	if refused.Load() != 0 {
		t.Errorf("%d of %d requests on healthy primaries were refused the store by an open breaker (%d degraded in all, first: %v); want none: a stopped node costs only its own slots",
			refused.Load(), healthy.Load(), degraded.Load(), firstWhy.Load())
	}
	if victimRefused.Load() == 0 || !st.BreakerOpen {
		t.Errorf("no request touching the stopped primary was refused by an open breaker (breaker open: %v); want its breaker open", st.BreakerOpen)
	}
	// Resumed, the primary answers the next probe.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if decide(victimHits) == limiter.NotDegraded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("requests touching the resumed primary still degraded 10 s on: %+v", lim.Stats())
		}
		time.Sleep(limiter.DefaultProbeInterval / 5)
	}
	if why := decide(healthyHits); why != limiter.NotDegraded {
		t.Fatalf("healthy primaries after the resume: %v", why)
	}
	if lim.Stats().BreakerOpen {
		t.Fatalf("a breaker still open after the resume: %+v", lim.Stats())
	}
}

// stoppableCluster starts a Cluster of three primaries that serves the
// slots it has while one of them is stopped, and an engine over a store
// on it, with the default store timeout.
func stoppableCluster(t *testing.T) (*redistest.Cluster, *Store, *limiter.Limiter) {
	t.Helper()
	c := redistest.StartClusterWith(t, redistest.ClusterConfig{
		Args: []string{"--cluster-require-full-coverage", "no"}})
	primaries, err := c.Primaries()
	if err != nil {
		t.Fatal(err)
	}
	url := "redis+cluster://" + primaries[0].Addr + "," + primaries[1].Addr + "," + primaries[2].Addr
	s, err := New(Options{URL: url, Prefix: uniquePrefix(t), EvictionCheck: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return c, s, limiter.New(s, limiter.Options{Timeout: limiter.DefaultTimeout})
}

package redisstore

import (
	"context"
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
	defer s.Close()
	lim := limiter.New(s, limiter.Options{Timeout: limiter.DefaultTimeout})
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

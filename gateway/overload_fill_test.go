package gateway

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
)

// TestOverloadFullQueueTakesFromTheLongestBacklog: a tenant that keeps
// the queue full (per_tenant as large as size, or eight tenants of one
// client at the default size / 8 each) left no place for anyone else: a
// request of another tenant that found the queue full was shed at once
// (queue_full), so under a flood the fair queue's turns never reached the
// other tenants at all. A request of a tenant with at least two fewer
// waiting in its tier than the tenant with the most now takes the place
// of that tenant's newest waiter (displaced), until their backlogs are
// level; one that would not leave them more level is still refused.
func TestOverloadFullQueueTakesFromTheLongestBacklog(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		u := &gatedUpstream{}
		g, base, c := overloadFront(t, front, overloadPolicy(`
limit: 1
tiers: [{name: default}]
tenant: header:X-Tenant
queue: {size: 4, per_tenant: 4, max_wait: 60s}`), u.ServeHTTP)
		var wg sync.WaitGroup
		var mu sync.Mutex
		answers := map[string]int{}
		send := func(who, tenant string) {
			wg.Go(func() {
				a, err := get(c, t.Context(), base+"/x", "X-Who", who, "X-Tenant", tenant)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				answers[who] = a.status
				mu.Unlock()
			})
		}
		answer := func(who string) int {
			mu.Lock()
			defer mu.Unlock()
			return answers[who]
		}
		all := []string{"h0", "h1", "h2", "h3", "h4", "l1", "l2", "l3"}
		var once sync.Once
		release := func() {
			once.Do(func() {
				for _, who := range all {
					u.open(who)
				}
				wg.Wait()
			})
		}
		defer release()
		// The heavy tenant holds the cap and fills the queue.
		send("h0", "heavy")
		pollUntil(t, "h0 in flight", func() bool { return u.holding() == 1 })
		for i := 1; i <= 4; i++ {
			send(fmt.Sprintf("h%d", i), "heavy")
			pollUntil(t, "heavy waiting", func() bool { return overloadState(g).Queued == i })
		}
		// The light tenant's first request takes h4's place, its second
		// h3's: then each has two waiting.
		send("l1", "light")
		pollUntil(t, "l1 answered or waiting in h4's place", func() bool { return answer("l1") != 0 || answer("h4") != 0 })
		if l1, h4 := answer("l1"), answer("h4"); l1 != 0 || h4 != http.StatusServiceUnavailable {
			t.Fatalf("a light request at a queue full of the heavy tenant's: l1 answered %d, h4 %d; want l1 waiting and h4 displaced (503)", l1, h4)
		}
		send("l2", "light")
		pollUntil(t, "h3 displaced", func() bool { return answer("h3") != 0 })
		// Level: the next light request is refused, displacing nobody.
		send("l3", "light")
		pollUntil(t, "l3 answered", func() bool { return answer("l3") != 0 })
		if s := overloadState(g); s.Queued != 4 || s.Inflight != 1 {
			t.Errorf("state %+v; want 4 waiting, 1 in flight", s)
		}
		release()
		for _, who := range all {
			want := http.StatusOK
			if who == "h3" || who == "h4" || who == "l3" {
				want = http.StatusServiceUnavailable
			}
			if got := answer(who); got != want {
				t.Errorf("%s: status %d, want %d", who, got, want)
			}
		}
		pollUntil(t, "nothing in flight or waiting", func() bool { s := overloadState(g); return s.Inflight == 0 && s.Queued == 0 })
	})
}

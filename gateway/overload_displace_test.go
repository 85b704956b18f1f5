package gateway

import (
	"io"
	"net/http"
	"sync"
	"testing"
)

// gatedUpstream holds each request until the gate of its X-Who is
// opened (open), and counts the requests it holds.
type gatedUpstream struct {
	mu    sync.Mutex
	gates map[string]chan struct{} // guarded by mu
	held  int                      // guarded by mu
}

func (u *gatedUpstream) gate(who string) chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.gates == nil {
		u.gates = map[string]chan struct{}{}
	}
	ch := u.gates[who]
	if ch == nil {
		ch = make(chan struct{})
		u.gates[who] = ch
	}
	return ch
}

// open lets who's request be answered.
func (u *gatedUpstream) open(who string) {
	ch := u.gate(who)
	u.mu.Lock()
	defer u.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func (u *gatedUpstream) holding() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.held
}

func (u *gatedUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ch := u.gate(r.Header.Get("X-Who"))
	u.mu.Lock()
	u.held++
	u.mu.Unlock()
	<-ch
	u.mu.Lock()
	u.held--
	u.mu.Unlock()
	_, _ = io.WriteString(w, "ok")
}

// TestOverloadDisplacesNewestArrival: the waiter a more critical request
// displaces is the newest arrival of the least critical tier, not a
// waiter that came before it and was passed over (its tenant held its
// share of the cap when a place came free) and so went to the end of its
// tenant's line.
func TestOverloadDisplacesNewestArrival(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		u := &gatedUpstream{}
		src := "server:\n  trusted_proxies: [127.0.0.1/32]\n" + overloadPolicy(`
limit: 2
tier_header: X-Priority
tenant: header:X-Tenant
tiers:
  - {name: critical}
  - {name: default}
  - {name: sheddable}
queue: {size: 3, per_tenant: 3, max_wait: 60s}`)
		g, base, c := overloadFront(t, front, src, u.ServeHTTP)
		var wg sync.WaitGroup
		var mu sync.Mutex
		answers := map[string]int{}
		send := func(who, tenant, tier string) {
			wg.Go(func() {
				a, err := get(c, t.Context(), base+"/x", "X-Who", who, "X-Tenant", tenant, "X-Priority", tier)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				answers[who] = a.status
				mu.Unlock()
			})
		}
		answered := func(who string) bool {
			mu.Lock()
			defer mu.Unlock()
			_, ok := answers[who]
			return ok
		}
		all := []string{"a1", "a2", "a3", "b1", "b2", "d1", "c1"}
		var once sync.Once
		release := func() {
			once.Do(func() {
				for _, who := range all {
					u.open(who)
				}
				wg.Wait()
			})
		}
		defer release() // a test that fails lets the held requests go too
		// Tenant a holds the cap; a3, then b1 and b2 wait (sheddable).
		send("a1", "a", "sheddable")
		send("a2", "a", "sheddable")
		pollUntil(t, "2 in flight", func() bool { return u.holding() == 2 })
		send("a3", "a", "sheddable")
		pollUntil(t, "a3 waiting", func() bool { return overloadState(g).Queued == 1 })
		send("b1", "b", "sheddable")
		pollUntil(t, "b1 waiting", func() bool { return overloadState(g).Queued == 2 })
		send("b2", "b", "sheddable")
		pollUntil(t, "b2 waiting", func() bool { return overloadState(g).Queued == 3 })
		// A place comes free: a3's tenant holds its share (1 of 2), so
		// a3 is passed over and b1 takes the place.
		u.open("a1")
		pollUntil(t, "b1 admitted", func() bool { return u.holding() == 2 && overloadState(g).Queued == 2 })
		// A default request fills the queue; a critical one then finds
		// it full and displaces the newest sheddable arrival: b2.
		send("d1", "d", "default")
		pollUntil(t, "d1 waiting", func() bool { return overloadState(g).Queued == 3 })
		send("c1", "c", "critical")
		pollUntil(t, "a sheddable waiter displaced", func() bool { return answered("a3") || answered("b2") })
		mu.Lock()
		a3, b2 := answers["a3"], answers["b2"]
		mu.Unlock()
		if b2 != http.StatusServiceUnavailable || a3 != 0 {
			t.Errorf("b2 (the newest arrival) answered %d, a3 (waiting since before it, passed over) %d; want b2 displaced (503) and a3 still waiting", b2, a3)
		}
		release()
		for _, who := range all {
			want := http.StatusOK
			if who == "b2" {
				want = http.StatusServiceUnavailable
			}
			if got := answers[who]; got != want {
				t.Errorf("%s: status %d, want %d (all: %v)", who, got, want, answers)
			}
		}
		pollUntil(t, "nothing in flight or waiting", func() bool { s := overloadState(g); return s.Inflight == 0 && s.Queued == 0 })
	})
}

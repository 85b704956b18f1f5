package gateway

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/promtest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/metrics"
)

// TestLeaseLostInAnOutage: a request in flight under a concurrency limit
// of one whose lease expires before a renewal reaches the store (an
// outage longer than lease_ttl, played by the store's clock moving past
// the lease's expiry) takes its slot again at its next renewal, so a
// second request is refused while it runs. When another request took the
// slot first, the loss is counted once in
// floodgate_concurrency_leases_lost_total (the first request runs on,
// not cut), and the first takes the slot again once it is free. On both
// engines and the middleware, on a memory store.
func TestLeaseLostInAnOutage(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, func(t *testing.T, fr string) {
		const ttl = 1500 * time.Millisecond // renewed every 500 ms
		rule := ruletest.Rule(t, floodgate.Limit{Name: "conn", Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: ttl})
		clock := newTestClock()
		eng := limiter.New(newMemStore(t, clock.Now), limiter.Options{})
		reg := prometheus.NewRegistry()
		m, err := metrics.New(reg, metrics.Options{})
		if err != nil {
			t.Fatal(err)
		}
		lostLeases := func() float64 {
			return promtest.Value(t, reg, "floodgate_concurrency_leases_lost_total", promtest.Labels{"limit": "conn"})
		}
		// held tells a request reached the handler; release[path] lets it end.
		held := make(chan string, 4)
		var mu sync.Mutex
		release := map[string]chan struct{}{"/a": make(chan struct{}), "/b": make(chan struct{})}
		free := func(path string) {
			mu.Lock()
			defer mu.Unlock()
			select {
			case <-release[path]:
			default:
				close(release[path])
			}
		}
		_, base, client := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: eng, Observer: m},
			func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				ch := release[r.URL.Path]
				mu.Unlock()
				if ch != nil {
					held <- r.URL.Path
					<-ch
				}
			})
		t.Cleanup(func() { free("/a"); free("/b") }) // before the server closes, which waits for them
		// slotHeld waits (within 10 s) until a peek at the limit says
		// whether its one slot is taken, as held wants.
		slotHeld := func(held bool) bool {
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				var res limiter.Result
				req := limiter.Request{Peek: true, Hits: []limiter.Hit{{Rule: rule, Key: "k", Cost: 1}}}
				if err := eng.Decide(context.Background(), &req, &res); err != nil {
					t.Fatal(err)
				}
				if !res.Allowed == held {
					return true
				}
			}
			return false
		}

		doneA := make(chan answer, 1)
		go func() { doneA <- do(t, client, "GET", base+"/a", nil) }()
		<-held

		// An outage longer than the lease's life ends, and nobody takes
		// the slot first: A's next renewal takes it again.
		clock.Advance(2 * ttl)
		if !slotHeld(true) {
			t.Fatal("after the outage the first request's renewals never took its slot again")
		}
		if a := do(t, client, "GET", base+"/other", nil); a.status != http.StatusTooManyRequests {
			t.Fatalf("a second request while the first runs, after the outage: %d, want 429", a.status)
		}

		// Another outage, and B reaches the store before A's renewal does
		// (tried again on the rare turn A's renewal comes first).
		doneB := make(chan answer, 1)
		for try := 0; ; try++ {
			if try == 20 {
				t.Fatal("A's renewal came before B's request twenty times running")
			}
			clock.Advance(2 * ttl)
			go func() { doneB <- do(t, client, "GET", base+"/b", nil) }()
			var b answer
			select {
			case <-held:
			case b = <-doneB:
			}
			if b.status == 0 {
				break // B holds the slot
			}
			if b.status != http.StatusTooManyRequests {
				t.Fatalf("B: %d", b.status)
			}
		}
		if !slotHeld(true) {
			t.Fatal("B holds no slot")
		}
		for deadline := time.Now().Add(10 * time.Second); lostLeases() == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("A's renewals found its slot taken, and no loss was counted")
			}
		}
		time.Sleep(ttl) // two renewals more, still denied: the loss is counted once
		if n := lostLeases(); n != 1 {
			t.Errorf("floodgate_concurrency_leases_lost_total %v, want 1 (once per lease lost)", n)
		}
		select {
		case a := <-doneA:
			t.Fatalf("the request that lost its slot was cut: %d", a.status)
		default:
		}

		// B ends: A's next renewal takes the slot again.
		free("/b")
		if b := <-doneB; b.status != http.StatusOK {
			t.Fatalf("B: %d", b.status)
		}
		if !slotHeld(true) {
			t.Fatal("once B ended, A's renewals never took the slot again")
		}
		if a := do(t, client, "GET", base+"/other", nil); a.status != http.StatusTooManyRequests {
			t.Errorf("a request while A runs, its slot taken again: %d, want 429", a.status)
		}
		free("/a")
		if a := <-doneA; a.status != http.StatusOK {
			t.Fatalf("A: %d", a.status)
		}
		if !slotHeld(false) {
			t.Error("A's slot stayed taken after it ended")
		}
	})
}

// The metrics count the leases requests in flight lose.
var _ LeaseObserver = (*metrics.Metrics)(nil)

package gateway

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
)

// TestCountedConcurrencyKeepsItsLease: a concurrency limit counted by
// outcome (count_on) holds its slot as a reservation; a request that runs
// longer than the limit's lease_ttl keeps it, so a second request while it
// runs is refused.
func TestCountedConcurrencyKeepsItsLease(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, func(t *testing.T, fr string) {
		const ttl = time.Second
		rule := ruletest.Rule(t, floodgate.Limit{Name: "conn", Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: ttl})
		held := make(chan struct{}, 1)
		release := make(chan struct{})
		var once sync.Once
		free := func() { once.Do(func() { close(release) }) }
		t.Cleanup(free)
		_, srvURL, client := startFront(t, fr, Options{Matcher: oneRule(rule, 401), Engine: memEngine(t)},
			func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/hold" {
					held <- struct{}{}
					<-release
				}
				w.WriteHeader(http.StatusUnauthorized)
			})
		done := make(chan answer, 1)
		go func() { done <- do(t, client, "GET", srvURL+"/hold", nil) }()
		<-held
		time.Sleep(ttl + ttl/2) // past the lease's lifetime, the first request still in flight
		a := do(t, client, "GET", srvURL+"/other", nil)
		free()
		<-done
		if a.status != http.StatusTooManyRequests {
			t.Errorf("a second request while the first has run %s past a lease_ttl of %s: %d, want 429 (one at a time)", ttl/2, ttl, a.status)
		}
	})
}

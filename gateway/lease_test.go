package gateway

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestLeasesOutliveSlowRequests: requests held far longer than their
// concurrency lease's lifetime keep their slots, because the gateway
// renews the leases of requests in flight; a limit of 2 never admits a
// third. Time is the synctest bubble's.
func TestLeasesOutliveSlowRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 300 * time.Millisecond
		store, err := memstore.New(memstore.Options{Now: func() int64 { return time.Now().UnixNano() },
			SnapshotInterval: -1, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		rule := ruletest.Rule(t, floodgate.Limit{Name: "two", Algorithm: floodgate.Concurrency, Max: 2, LeaseTTL: ttl})
		g, err := New(Options{Matcher: oneRule(rule), Engine: limiter.New(store, limiter.Options{})})
		if err != nil {
			t.Fatal(err)
		}
		hold := make(chan struct{})
		h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				<-hold
			}
		}))
		serve := func(path string) int {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			return rec.Code
		}
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				if code := serve("/slow"); code != 200 {
					t.Errorf("slow request: %d", code)
				}
			})
		}
		synctest.Wait() // both are held in the handler
		for i := range 10 {
			time.Sleep(ttl) // ten lifetimes of a lease in all
			if code := serve("/fast"); code != 429 {
				t.Fatalf("after %v a third request got %d: a lease of a request in flight expired", time.Duration(i+1)*ttl, code)
			}
		}
		close(hold)
		wg.Wait()
		if code := serve("/fast"); code != 200 {
			t.Errorf("after the slow requests ended: %d, want 200 (leases released)", code)
		}
	})
}

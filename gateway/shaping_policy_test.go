package gateway

import (
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

const shapingPolicy = `version: 1
routes:
  - name: queue
    match: {paths: ["/queue/**"]}
    upstream: http://127.0.0.1:9
  - name: conn
    match: {paths: ["/conn/**"]}
    upstream: http://127.0.0.1:9
limits:
  - name: report-queue     # NGINX: rate=10r/s burst=3 delay=1
    algorithm: leaky_queue
    rate: 10
    burst: 3
    delay: 1
    key: global
    match: {routes: [queue]}
  - name: report-conn      # NGINX: limit_conn 2
    algorithm: concurrency
    limit: 2
    key: global
    match: {routes: [conn]}
`

// TestShapingFromPolicyFile runs a leaky queue and a concurrency limit
// written in a policy file through the reverse proxy and the engine.
func TestShapingFromPolicyFile(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testShapingFromPolicyFile)
}

func testShapingFromPolicyFile(t *testing.T, fr string) {
	var mu sync.Mutex
	var departures []time.Duration
	start := time.Now()
	var inflight, peak atomic.Int64
	hold := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/conn/x" {
			n := inflight.Add(1)
			defer inflight.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			<-hold
			return
		}
		mu.Lock()
		departures = append(departures, time.Since(start))
		mu.Unlock()
	})
	upURL, _ := url.Parse(up.URL)
	p := compilePolicy(t, "shaping.yaml", shapingPolicy)
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{Upstream: upURL})
	if err != nil {
		t.Fatal(err)
	}
	clock := newTestClock() // frozen: the five queue requests arrive together
	g, err := New(Options{Matcher: pm, Engine: limiter.New(newMemStore(t, clock.Now), limiter.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	frontURL := serveFront(t, fr, g, nil)
	c := newClient(t)

	// Leaky queue: 2 leave at once (the first and the one delay=1 lets
	// through), 2 wait 100 ms and 200 ms, the 5th finds the queue full.
	var wg sync.WaitGroup
	codes := make([]int, 5)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = do(t, c, "GET", frontURL+"/queue/x", nil).status
		}()
	}
	wg.Wait()
	slices.Sort(codes)
	if want := []int{200, 200, 200, 200, 429}; !slices.Equal(codes, want) {
		t.Fatalf("queue: %v, want %v", codes, want)
	}
	slices.Sort(departures)
	for k, slot := range []time.Duration{0, 0, 100 * time.Millisecond, 200 * time.Millisecond} {
		if departures[k] < slot-5*time.Millisecond {
			t.Errorf("departure %d at %v, before its slot at %v", k, departures[k], slot)
		}
	}

	// Concurrency: two held at the upstream, a third gets 429, and once
	// they finish a new one passes.
	results := make(chan int, 2)
	for i := 0; i < 2; i++ {
		go func() { results <- do(t, c, "GET", frontURL+"/conn/x", nil).status }()
	}
	deadline := time.Now().Add(20 * time.Second)
	for inflight.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the two requests never reached the upstream")
		}
		time.Sleep(5 * time.Millisecond)
	}
	a := do(t, c, "GET", frontURL+"/conn/x", nil)
	if a.status != 429 {
		t.Errorf("third concurrent request: %d", a.status)
	}
	checkFields(t, a, "report-conn", 0, -1, 0)
	close(hold)
	for i := 0; i < 2; i++ {
		if s := <-results; s != 200 {
			t.Errorf("held request: %d", s)
		}
	}
	// The leases are given back as the two requests end.
	for {
		s := do(t, c, "GET", frontURL+"/conn/x", nil).status
		if s == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the two finished: %d", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if peak.Load() != 2 {
		t.Errorf("peak in flight %d, want 2", peak.Load())
	}
}

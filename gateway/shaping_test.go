package gateway

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/internal/sfv"
	"github.com/floodgate/floodgate/limiter"
)

// oneRule matches every request to one rule under one key.
func oneRule(r *limiter.Rule, countOn ...int) funcMatcher {
	return func(_ *Request, m *Match) error {
		m.Hits = append(m.Hits, limiter.Hit{Rule: r, Key: "k", Cost: 1})
		if len(countOn) > 0 {
			m.CountOn = append(m.CountOn, countOn)
		}
		return nil
	}
}

// TestLeakyQueueSpacing sends 7 requests in one instant to a leaky queue of
// 10/s with room for 5: one leaves at once, five wait for their slots 100 ms
// apart, the seventh finds the queue full (429). It runs the middleware in a
// synctest bubble, where the queue's timers follow a fake clock: each
// departure, measured at the handler, is exactly on its slot.
func TestLeakyQueueSpacing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const interval = 100 * time.Millisecond
		rule := ruletest.Rule(t, floodgate.Limit{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 10, Per: time.Second, Burst: 5})
		clock := newTestClock() // the store's clock, frozen: every request arrives at the same instant
		g, err := New(Options{Matcher: oneRule(rule), Engine: limiter.New(newMemStore(t, clock.Now), limiter.Options{})})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var departures []time.Duration
		start := time.Now()
		h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			departures = append(departures, time.Since(start))
			mu.Unlock()
		}))

		var wg sync.WaitGroup
		answers := make([]answer, 7)
		for i := range answers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i] = serve(h, "GET", "/", nil)
			}()
		}
		wg.Wait()
		got := statuses(answers)
		slices.Sort(got)
		if want := []int{200, 200, 200, 200, 200, 200, 429}; !slices.Equal(got, want) {
			t.Fatalf("statuses %v, want %v", got, want)
		}
		for _, a := range answers {
			if a.status == 429 {
				// Full queue: the next place opens when the first request
				// leaves the queue, 100 ms later: Retry-After 1.
				checkFields(t, a, "queue", 0, -1, 1)
			}
		}
		slices.Sort(departures)
		want := []time.Duration{0, interval, 2 * interval, 3 * interval, 4 * interval, 5 * interval}
		if !slices.Equal(departures, want) {
			t.Errorf("departures at %v, want one every %v: %v", departures, interval, want)
		}
	})
}

// TestLeakyQueueFieldsCountFromTheDeparture: a request a leaky queue
// delays goes on with the RateLimit fields of the moment it leaves the
// queue, not of its arrival. Four requests come in one instant to a
// leaky queue of one a second with room for three, under a window of 100
// an hour: they leave 0, 1, 2 and 3 s later. As each leaves, the queue
// has drained to it alone, so it has room for three again and its next
// place comes in a second (r=3, t=1); the window ends 3,600 s after their
// arrival, so the one that waited k seconds says 3,600 − k. It runs the
// middleware in a synctest bubble, where the queue's timers follow a fake
// clock and the store's clock stands still.
func TestLeakyQueueFieldsCountFromTheDeparture(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		queue := ruletest.Rule(t, floodgate.Limit{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Second, Burst: 3})
		hour := ruletest.Rule(t, floodgate.Limit{Name: "hour", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
		both := funcMatcher(func(_ *Request, m *Match) error {
			m.Hits = append(m.Hits, limiter.Hit{Rule: queue, Key: "k", Cost: 1}, limiter.Hit{Rule: hour, Key: "k", Cost: 1})
			return nil
		})
		clock := newTestClock()
		g, err := New(Options{Matcher: both, Engine: limiter.New(newMemStore(t, clock.Now), limiter.Options{})})
		if err != nil {
			t.Fatal(err)
		}
		h := g.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		var wg sync.WaitGroup
		answers := make([]answer, 4)
		for i := range answers {
			wg.Go(func() { answers[i] = serve(h, "GET", "/", nil) })
		}
		wg.Wait()
		seen := map[int64]bool{}
		for _, a := range answers {
			if a.status != http.StatusOK {
				t.Fatalf("status %d, want 200", a.status)
			}
			items, err := sfv.ParseList(a.header.Get("RateLimit"))
			if err != nil || len(items) != 2 {
				t.Fatalf("RateLimit %q: %v", a.header.Get("RateLimit"), err)
			}
			var r, tt [2]int64
			for j, name := range []string{"queue", "hour"} {
				if n, _ := items[j].Name(); n != name {
					t.Fatalf("RateLimit %q: item %d is %q, want %q", a.header.Get("RateLimit"), j, n, name)
				}
				r[j], _ = items[j].Int("r")
				tt[j], _ = items[j].Int("t")
			}
			k := 99 - r[1] // the seconds it waited: the window had 99-k left
			seen[k] = true
			if r[0] != 3 || tt[0] != 1 || tt[1] != 3600-k {
				t.Errorf("after %d s in the queue: RateLimit %q, want queue r=3 t=1 and hour t=%d", k, a.header.Get("RateLimit"), 3600-k)
			}
		}
		if len(seen) != 4 {
			t.Errorf("the window's remaining units %v, want 99, 98, 97 and 96", seen)
		}
	})
}

// TestQueuedClientGoesAway checks, over a real connection, that a request
// whose client leaves while it waits in the queue never reaches the
// upstream and gives its place back.
func TestQueuedClientGoesAway(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testQueuedClientGoesAway)
}

func testQueuedClientGoesAway(t *testing.T, fr string) {
	rule := ruletest.Rule(t, floodgate.Limit{Name: "queue", Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Minute, Burst: 3})
	clock := newTestClock()
	store := newMemStore(t, clock.Now)
	var reached atomic.Int64
	_, srvURL, client := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: limiter.New(store, limiter.Options{})},
		func(w http.ResponseWriter, r *http.Request) { reached.Add(1) })
	// nextDelay is how long the next request would wait in the queue.
	nextDelay := func() time.Duration {
		t.Helper()
		out := make([]floodgate.Decision, 1)
		hit := []limiter.Hit{{Rule: rule, Key: "k", Cost: 1}}
		if err := store.Decide(context.Background(), hit, true, out); err != nil {
			t.Fatal(err)
		}
		if !out[0].Allowed {
			t.Fatalf("peek: %+v, want a free place", out[0])
		}
		return out[0].Delay
	}
	waitDelay := func(want time.Duration, what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for nextDelay() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the next place is %v out, want %v", what, nextDelay(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if a := do(t, client, "GET", srvURL, nil); a.status != 200 {
		t.Fatalf("first request %d", a.status)
	}
	// The second waits a minute; its client gives up once it is queued.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", srvURL, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitDelay(2*time.Minute, "the second request never took its place")
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the queued request was answered")
	}
	// Its place is given back as the server sees the client go: the queue
	// holds the first one's successor slot (delay one minute) for the next
	// request, as before it came. Only a request that leaves the queue
	// before its slot gives its place back, so the held one never went on.
	waitDelay(time.Minute, "the place of the request whose client left was not given back")
	if n := reached.Load(); n != 1 {
		t.Errorf("upstream reached %d times, want 1", n)
	}
}

// TestConcurrencyLimit runs 24 clients against a concurrency limit of 3:
// the handler never sees more than 3 at once, the others get 429, and every
// lease comes back (a request after the run passes).
func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testConcurrencyLimit)
}

func testConcurrencyLimit(t *testing.T, fr string) {
	const limit = 3
	rule := ruletest.Rule(t, floodgate.Limit{Name: "conn", Algorithm: floodgate.Concurrency, Max: limit, LeaseTTL: time.Minute})
	var inflight, peak, served atomic.Int64
	block := make(chan struct{})
	holding := make(chan struct{}, limit)
	_, srvURL, client := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: memEngine(t)}, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			holding <- struct{}{}
			<-block
			return
		}
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		served.Add(1)
		time.Sleep(5 * time.Millisecond)
	})

	var wg sync.WaitGroup
	var denied atomic.Int64
	for c := 0; c < 24; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				a := do(t, client, "GET", srvURL, nil)
				switch a.status {
				case 200:
				case 429:
					denied.Add(1)
					if !strings.Contains(a.header.Get("RateLimit-Policy"), `"conn";q=3;qu="concurrent-requests"`) {
						t.Errorf("RateLimit-Policy %q", a.header.Get("RateLimit-Policy"))
					}
					if strings.Contains(a.header.Get("RateLimit"), ";t=") {
						t.Errorf("concurrency item with t: %q", a.header.Get("RateLimit"))
					}
				default:
					t.Errorf("status %d", a.status)
				}
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > limit || p < 1 {
		t.Errorf("peak in flight %d, want between 1 and %d", p, limit)
	}
	if served.Load()+denied.Load() != 240 {
		t.Errorf("served %d + denied %d != 240", served.Load(), denied.Load())
	}
	// Every lease was given back: three requests can be in flight again.
	var wg2 sync.WaitGroup
	for i := 0; i < limit; i++ {
		wg2.Add(1)
		go func() { defer wg2.Done(); do(t, client, "GET", srvURL+"/hold", nil) }()
	}
	for i := 0; i < limit; i++ {
		<-holding
	}
	if a := do(t, client, "GET", srvURL+"/hold", nil); a.status != 429 {
		t.Errorf("a 4th request while 3 are held: %d, want 429", a.status)
	}
	close(block)
	wg2.Wait()
}

// TestConcurrencyReleasedOnPanic checks that a lease comes back when the
// handler panics and when the client goes away mid-request.
func TestConcurrencyReleasedOnPanic(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, func(t *testing.T, fr string) {
		testReleasedOnPanic(t, fr, limiter.New(newMemStore(t, nil), limiter.Options{}))
	})
}

// testReleasedOnPanic: the handler (or the upstream) panics, then holds a
// request until its client leaves (or, for an engine that cannot tell
// while the upstream holds the request, until the test lets it go).
func testReleasedOnPanic(t *testing.T, fr string, engine limiter.Engine) {
	rule := ruletest.Rule(t, floodgate.Limit{Name: "one", Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: time.Hour})
	var calls atomic.Int64
	held := make(chan struct{})
	letGo := make(chan struct{})
	_, srvURL, c := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: engine}, func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1:
			panic(http.ErrAbortHandler)
		case 2:
			close(held)
			select { // held until the client leaves
			case <-r.Context().Done():
			case <-letGo:
			}
		}
	})
	if resp, err := c.Get(srvURL); err == nil {
		resp.Body.Close()
		if fr == frontMiddleware || resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("a panicking handler answered %d", resp.StatusCode)
		}
	}
	// The client leaves once the handler holds its request.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-held:
			cancel()
		case <-ctx.Done():
		}
	}()
	req, _ := http.NewRequestWithContext(ctx, "GET", srvURL, nil)
	if _, err := c.Do(req); err == nil {
		t.Fatal("the held request was answered")
	}
	close(letGo)
	// The releases run as the handlers return; wait for the slot to open.
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := do(t, c, "GET", srvURL, nil)
		if a.status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease never came back: %d", a.status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCountOnStatus: a login limit of 2 per minute that counts only 401s.
// Successful logins are free; after two failures the third try is refused
// before it reaches the handler.
func TestCountOnStatus(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testCountOnStatus)
}

func testCountOnStatus(t *testing.T, fr string) {
	rule := ruletest.Rule(t, floodgate.Limit{Name: "login", Algorithm: floodgate.SlidingLog, Max: 2, Window: time.Minute})
	clock := newTestClock()
	var reached atomic.Int64
	_, srvURL, c := startFront(t, fr, Options{Matcher: oneRule(rule, 401, 403), Engine: limiter.New(newMemStore(t, clock.Now), limiter.Options{})}, func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if r.Header.Get("Password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, "no")
		}
	})
	wrong := map[string]string{"Password": "wrong"}
	right := map[string]string{"Password": "right"}
	var got []int
	for _, h := range []map[string]string{right, right, right, wrong, right, wrong, wrong, right} {
		got = append(got, do(t, c, "GET", srvURL, h).status)
		clock.Advance(time.Second)
	}
	if want := []int{200, 200, 200, 401, 200, 401, 429, 429}; !slices.Equal(got, want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	if n := reached.Load(); n != 6 {
		t.Errorf("handler reached %d times, want 6", n)
	}
	// The window forgets the first failure (at 3 s) a minute later.
	clock.Advance(time.Minute - 5*time.Second)
	a := do(t, c, "GET", srvURL, wrong)
	if a.status != 401 {
		t.Errorf("after the window: %d, want 401", a.status)
	}
}

// TestNeverFits: a request costing more than a limit's capacity gets 429
// without Retry-After, and never reaches the handler.
func TestNeverFits(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testNeverFits)
}

func testNeverFits(t *testing.T, fr string) {
	rule := ruletest.Rule(t, floodgate.Limit{Name: "small", Algorithm: floodgate.FixedWindow, Max: 2, Window: time.Minute})
	m := funcMatcher(func(_ *Request, m *Match) error {
		m.Hits = append(m.Hits, limiter.Hit{Rule: rule, Key: "k", Cost: 3})
		return nil
	})
	for _, engine := range []limiter.Engine{limiter.New(newMemStore(t, nil), limiter.Options{})} {
		var reached atomic.Int64
		_, srvURL, c := startFront(t, fr, Options{Matcher: m, Engine: engine}, func(http.ResponseWriter, *http.Request) { reached.Add(1) })
		a := do(t, c, "GET", srvURL, nil)
		if a.status != 429 || a.header.Get("Retry-After") != "" || reached.Load() != 0 {
			t.Errorf("%T: %d Retry-After %q, handler reached %d times", engine, a.status, a.header.Get("Retry-After"), reached.Load())
		}
	}
}

// TestShadowQueueDelaysNothing: a shadow leaky queue is counted but holds
// no request (one a minute with room for 5: the later requests would
// otherwise wait minutes).
func TestShadowQueueDelaysNothing(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testShadowQueueDelaysNothing)
}

func testShadowQueueDelaysNothing(t *testing.T, fr string) {
	rule := ruletest.Shadow(t, floodgate.Limit{Name: "shadow-queue", Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Minute, Burst: 5})
	clock := newTestClock()
	_, srvURL, c := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: limiter.New(newMemStore(t, clock.Now), limiter.Options{})},
		func(http.ResponseWriter, *http.Request) {})
	c.Timeout = 20 * time.Second // far below the minutes a real queue would hold them
	for i := 0; i < 8; i++ {
		a := do(t, c, "GET", srvURL, nil)
		if a.status != 200 || a.header.Get("RateLimit") != "" {
			t.Fatalf("request %d: %d, RateLimit %q", i, a.status, a.header.Get("RateLimit"))
		}
	}
}

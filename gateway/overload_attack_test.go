package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/floodgate/floodgate/internal/racecheck"
)

// The overload control driven by those it limits: a tenant whose requests
// hold their places long, clients that leave at each point of an
// exchange, a queue filled with many waiters and large ones, an upstream
// that fails at once. Each bound is asked what it does when someone
// drives it.

// overloadTenants returns how many tenants the gateway's only controller
// counts (requests in flight or waiting), and the tenants waiting in its
// queues.
func overloadTenants(g *Gateway) (counted, waiting int) {
	g.ovl.mu.Lock()
	defer g.ovl.mu.Unlock()
	for _, c := range g.ovl.byRoute {
		c.mu.Lock()
		counted += len(c.use)
		for _, q := range c.queues {
			waiting += q.Tenants()
		}
		c.mu.Unlock()
	}
	return counted, waiting
}

// TestOverloadShareOfCap: a tenant whose requests hold their places long
// (an expensive query) and that keeps more waiting cannot keep the cap: a
// place it frees goes to the other tenants waiting, below their share,
// before it; once nobody else waits, it takes the place again (no idle
// capacity).
func TestOverloadShareOfCap(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		hold := make(chan struct{}) // each send lets one of heavy's requests answer
		var mu sync.Mutex
		var seen []string
		h := func(w http.ResponseWriter, r *http.Request) {
			who := r.Header.Get("X-Tenant")
			mu.Lock()
			seen = append(seen, who)
			mu.Unlock()
			if who == "heavy" {
				select {
				case <-hold:
				case <-r.Context().Done():
				}
			}
			_, _ = io.WriteString(w, "ok")
		}
		g, base, c := overloadFront(t, front, overloadPolicy(`
limit: 4
tiers: [{name: default}]
tenant: header:X-Tenant
queue: {size: 16, per_tenant: 8, max_wait: 5s}`), h)
		seenNow := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(seen) }
		var wg sync.WaitGroup
		send := func(tenant string) <-chan int {
			done := make(chan int, 1)
			wg.Go(func() {
				a, err := get(c, t.Context(), base+"/x", "X-Tenant", tenant)
				if err != nil {
					t.Error(err)
				}
				done <- a.status
			})
			return done
		}
		defer func() {
			close(hold)
			wg.Wait()
		}()
		// heavy holds the cap and has four more waiting, then a and b
		// wait: the ring of turns is heavy, a, b.
		var first <-chan int
		for i := range 8 {
			done := send("heavy")
			if i == 0 {
				first = done
			}
			if i < 4 {
				pollUntil(t, "heavy in flight", func() bool { return len(seenNow()) == i+1 })
			} else {
				pollUntil(t, "heavy queued", func() bool { return overloadState(g).Queued == i-3 })
			}
		}
		a := send("a")
		pollUntil(t, "a queued", func() bool { return overloadState(g).Queued == 5 })
		b := send("b")
		pollUntil(t, "b queued", func() bool { return overloadState(g).Queued == 6 })
		if n, w := overloadTenants(g); n != 3 || w != 3 {
			t.Errorf("tenants counted %d, waiting %d; want 3 and 3", n, w)
		}

		// One of heavy's places comes free: heavy holds 3 of 4, above its
		// share of 2 (4 places, 3 tenants), so a and b are served first,
		// without waiting for heavy's other requests (past their max_wait
		// they would be refused).
		hold <- struct{}{}
		for _, w := range []struct {
			who  string
			done <-chan int
		}{{"heavy's first", first}, {"a", a}, {"b", b}} {
			if got := <-w.done; got != 200 {
				t.Errorf("%s: status %d, want 200", w.who, got)
			}
		}
		// Only heavy waits now: it takes the freed places again.
		pollUntil(t, "heavy back at the cap", func() bool {
			s := overloadState(g)
			return s.Inflight == 4 && s.Queued == 3 && len(seenNow()) == 7
		})
		if s := seenNow(); len(s) != 7 || !slices.Equal(s[4:6], []string{"a", "b"}) && !slices.Equal(s[4:6], []string{"b", "a"}) || s[6] != "heavy" {
			t.Errorf("the upstream saw %q; want heavy ×4, a and b, heavy", s)
		}
		if n, w := overloadTenants(g); n != 1 || w != 1 {
			t.Errorf("tenants counted %d, waiting %d; want 1 and 1", n, w)
		}
	})
}

// learnOne is an adaptive limit that ends a window with nearly every
// answer, so that any one sample it is taught shows: a drop cuts it, a
// latency becomes its Latency and NoLoad.
const learnOne = `
adaptive: {min: 1, max: 64, initial: 64, window: 1ms, min_samples: 1}
tier: critical`

// TestOverloadLeftClientTeachesNothing: a client that leaves while its
// request is in flight teaches the adaptive limit nothing, even when the
// handler answers its request's end (a 503, or an answer at once): those
// answers come after the client left and say nothing of the load. Only
// the answers of clients still there make its latency, and nothing is
// cut. (On the reverse proxy of the net/http engine the upstream's
// request ends with the client's, so no status comes; the edge engine does
// not see a client leave while the upstream works: what comes is the
// upstream's own answer, at its own pace.)
func TestOverloadLeftClientTeachesNothing(t *testing.T) {
	const latency = 100 * time.Millisecond
	for _, code := range []int{http.StatusServiceUnavailable, http.StatusOK} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			t.Parallel()
			testLeftClientTeachesNothing(t, code, latency)
		})
	}
}

func testLeftClientTeachesNothing(t *testing.T, code int, latency time.Duration) {
	forFronts(t, []string{frontMiddleware, frontNetHTTP}, func(t *testing.T, front string) {
		arrived := make(chan struct{}, 1)
		h := func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Leave") == "" {
				time.Sleep(latency)
				_, _ = io.WriteString(w, "ok")
				return
			}
			arrived <- struct{}{}
			select {
			case <-r.Context().Done():
			case <-time.After(time.Minute):
			}
			w.WriteHeader(code)
		}
		g, base, c := overloadFront(t, front, overloadPolicy(learnOne), h)
		for range 3 {
			ctx, cancel := context.WithCancel(t.Context())
			left := make(chan error, 1)
			go func() {
				_, err := get(c, ctx, base+"/leaves", "X-Leave", "1")
				left <- err
			}()
			<-arrived
			cancel()
			if err := <-left; !errors.Is(err, context.Canceled) {
				t.Fatalf("the client that left got %v", err)
			}
			pollUntil(t, "its place back", func() bool { return overloadState(g).Inflight == 0 })
		}
		// Answers to clients that stay, until a window ends.
		for i := 0; i < 100 && overloadState(g).Latency == 0; i++ {
			if a, err := get(c, t.Context(), base+"/stays"); err != nil || a.status != 200 {
				t.Fatalf("a client that stays: %v %v", a.status, err)
			}
		}
		if s := overloadState(g); s.Limit != 64 || s.Latency < latency || s.NoLoad < latency {
			t.Errorf("the adaptive limit learnt from clients that left: %+v (want limit 64, latencies of at least %v)", s, latency)
		}
	})
}

// TestOverloadClientLeavesMidAnswer: a client that leaves after the status
// line, while the answer streams, gives its place back when the gateway
// sees it gone, long before the upstream would end the stream, and the
// adaptive limit learns the upstream's latency to the status line, not
// how long the client held the stream: no drop, nothing cut.
func TestOverloadClientLeavesMidAnswer(t *testing.T) {
	const latency, hold = 100 * time.Millisecond, 600 * time.Millisecond
	forFronts(t, allFronts, func(t *testing.T, front string) {
		h := func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(latency)
			if r.URL.Path != "/stream" {
				_, _ = io.WriteString(w, "ok")
				return
			}
			rc := http.NewResponseController(w)
			for range 600 { // 30 s at most
				if _, err := io.WriteString(w, "chunk\n"); err != nil {
					return
				}
				_ = rc.Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
		g, base, c := overloadFront(t, front, overloadPolicy(learnOne), h)
		req, err := http.NewRequestWithContext(t.Context(), "GET", base+"/stream", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		held := time.Now()
		buf := make([]byte, 64)
		for time.Since(held) < hold {
			if _, err := resp.Body.Read(buf); err != nil {
				t.Fatalf("the stream ended early: %v", err)
			}
		}
		resp.Body.Close() // unread: the connection is closed
		pollUntil(t, "the place back", func() bool { return overloadState(g).Inflight == 0 })
		// The next answer ends the window of the one that left.
		for i := 0; i < 100 && overloadState(g).Latency == 0; i++ {
			if a, err := get(c, t.Context(), base+"/x"); err != nil || a.status != 200 {
				t.Fatalf("the next request: %v %v", a.status, err)
			}
		}
		if s := overloadState(g); s.Limit != 64 || s.Latency < latency || s.Latency >= hold {
			t.Errorf("after a client left mid-answer: %+v; want limit 64 and the latency to the status line (%v, not %v)", s, latency, hold)
		}
	})
}

// shedReasons is an Observer that counts sheds by reason.
type shedReasons struct {
	nopObserver
	mu sync.Mutex
	by map[string]int
}

func (o *shedReasons) OverloadShed(_, _, _, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.by == nil {
		o.by = map[string]int{}
	}
	o.by[reason]++
}

func (o *shedReasons) get(reason string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.by[reason]
}

// TestOverloadQueueDriven: a queue driven by many waiters of many
// tenants, each naming its tenant in a 32 KiB field, holds no more than
// its size and each tenant's backlog; the first newcomers take the places
// of the longer backlogs' newest waiters until every tenant waiting has
// one, the rest are refused at once, the waiters are refused at max_wait,
// and nothing of them stays: no waiter, no tenant counted or queued. (The
// middleware's queue is the net/http engine's.)
func TestOverloadQueueDriven(t *testing.T) {
	forFronts(t, proxyFronts, func(t *testing.T, front string) {
		u := newHolding()
		obs := &shedReasons{}
		p := compilePolicy(t, "overload.yaml", overloadPolicy(`
limit: 1
tiers: [{name: default}]
tenant: header:X-Tenant
queue: {size: 8, per_tenant: 2, max_wait: 2s}`))
		pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		g, base, c := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t), Observer: obs}, u.ServeHTTP)
		held := make(chan struct{})
		go func() {
			defer close(held)
			if a, err := get(c, t.Context(), base+"/held", "X-Tenant", "holder"); err != nil || a.status != 200 {
				t.Errorf("the held request: %v %v", a.status, err)
			}
		}()
		pollUntil(t, "1 in flight", func() bool { return u.now.Load() == 1 })
		tenant := func(i int) string { return fmt.Sprintf("t%02d-%s", i, strings.Repeat("x", 32<<10)) }
		var wg sync.WaitGroup
		var release sync.Once
		defer func() { // also when the test stops early
			release.Do(func() { close(u.release) })
			wg.Wait()
			<-held
		}()
		var mu sync.Mutex
		statuses := map[int]int{}
		send := func(i int) {
			wg.Go(func() {
				a, err := get(c, t.Context(), base+"/x", "X-Tenant", tenant(i))
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				statuses[a.status]++
				mu.Unlock()
			})
		}
		// Two tenants of three requests each: each waits with two, the
		// third is refused (tenant_full); then four more tenants fill the
		// queue.
		for i := range 2 {
			for range 3 {
				send(i)
			}
		}
		pollUntil(t, "two tenants' backlogs full", func() bool {
			return overloadState(g).Queued == 4 && obs.get(ShedTenantFull) == 2
		})
		for i := 2; i < 6; i++ {
			send(i)
		}
		pollUntil(t, "the queue full", func() bool { return overloadState(g).Queued == 8 })
		// Many more tenants: two take the places of the second waiters
		// of the first two tenants, the rest are refused at once, the
		// queue holds 8, one of each of 8 tenants.
		for i := 6; i < 46; i++ {
			send(i)
		}
		pollUntil(t, "2 displaced, 38 refused at once", func() bool {
			return obs.get(ShedDisplaced) == 2 && obs.get(ShedQueueFull) == 38
		})
		if s := overloadState(g); s.Queued != 8 || s.Inflight != 1 {
			t.Errorf("state %+v, want 8 queued and 1 in flight", s)
		}
		if n, w := overloadTenants(g); n != 9 || w != 8 {
			t.Errorf("tenants counted %d, waiting %d; want 9 and 8", n, w)
		}
		wg.Wait() // the waiters are refused at max_wait
		if got := obs.get(ShedTimeout); got != 8 {
			t.Errorf("%d timed out, want 8", got)
		}
		if statuses[http.StatusServiceUnavailable] != 50 || len(statuses) != 1 {
			t.Errorf("statuses %v, want 50 × 503", statuses)
		}
		if n, w := overloadTenants(g); n != 1 || w != 0 || overloadState(g).Queued != 0 {
			t.Errorf("after the waiters: tenants counted %d, waiting %d, state %+v; want the holder alone", n, w, overloadState(g))
		}
		release.Do(func() { close(u.release) })
		<-held
		pollUntil(t, "nothing held", func() bool { n, _ := overloadTenants(g); return n == 0 && overloadState(g).Inflight == 0 })
	})
}

// TestOverloadUpstreamFailsFast: an upstream that fails at once (its port
// refuses connections, or it answers 502 in no time) never grows the
// adaptive limit: every window of drops cuts it, down to its minimum and
// no further, nothing is left in flight or waiting, and every client gets
// the gateway's 502 or its 503. Once the upstream answers again, the limit
// grows back.
func TestOverloadUpstreamFailsFast(t *testing.T) {
	const block = `
adaptive: {min: 2, max: 32, initial: 16, window: 20ms, min_samples: 10}
tiers: [{name: default}]
queue: {size: 64, per_tenant: 64, max_wait: 1s}`
	// failing drives the route from eight clients until its limit is at its
	// minimum, every answer a 502 or a 503, and checks that the limit never
	// rose.
	failing := func(t *testing.T, g *Gateway, url string) {
		t.Helper()
		top := 0
		var mu sync.Mutex
		stop := drive(t, url, func(status int) bool {
			mu.Lock()
			top = max(top, overloadState(g).Limit)
			mu.Unlock()
			return status == http.StatusBadGateway || status == http.StatusServiceUnavailable
		})
		defer stop()
		pollUntil(t, "the limit at its minimum", func() bool { return overloadState(g).Limit == 2 })
		stop()
		if top > 16 {
			t.Errorf("the limit rose to %d while the upstream failed", top)
		}
		pollUntil(t, "nothing held", func() bool { s := overloadState(g); return s.Inflight == 0 && s.Queued == 0 })
	}
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := "http://" + ln.Addr().String()
		ln.Close()
		forFronts(t, proxyFronts, func(t *testing.T, front string) {
			src := strings.Replace(overloadPolicy(block), "http://127.0.0.1:9", closed, 1)
			g, base, _ := overloadFront(t, front, src, nil)
			failing(t, g, base+"/x")
		})
	})
	t.Run("502", func(t *testing.T) {
		t.Parallel()
		forFronts(t, allFronts, func(t *testing.T, front string) {
			var up atomic.Bool
			h := func(w http.ResponseWriter, r *http.Request) {
				if up.Load() {
					_, _ = io.WriteString(w, "ok")
					return
				}
				w.WriteHeader(http.StatusBadGateway)
			}
			g, base, _ := overloadFront(t, front, overloadPolicy(block), h)
			failing(t, g, base+"/x")
			// The upstream recovers: the limit grows back.
			up.Store(true)
			stop := drive(t, base+"/x", func(status int) bool {
				return status == http.StatusOK || status == http.StatusServiceUnavailable
			})
			defer stop()
			// The limit grows with the answers it learns from, which a
			// machine loaded by other tests sends more slowly.
			pollUntilFor(t, "the limit above its minimum", time.Minute, func() bool { return overloadState(g).Limit > 4 })
		})
	})
}

// drive sends GET requests to url from eight clients, one after the other
// each, until the function it returns is called (which waits for them;
// calls after the first do nothing), failing the test once for an answer
// that ok refuses.
func drive(t *testing.T, url string, ok func(status int) bool) (stop func()) {
	t.Helper()
	c := newClient(t)
	done := make(chan struct{})
	var wg sync.WaitGroup
	var once, stopped sync.Once
	for range 8 {
		wg.Go(func() {
			for range 20000 {
				select {
				case <-done:
					return
				default:
				}
				a, err := get(c, t.Context(), url)
				if err != nil {
					t.Error(err)
					return
				}
				if !ok(a.status) {
					once.Do(func() { t.Errorf("status %d", a.status) })
				}
			}
		})
	}
	return func() {
		stopped.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}

// TestOverloadUpstreamRefusals: the upstream's 429, its refusal of one
// client, is an answer like any: the adaptive limit learns its latency and
// cuts nothing. Its 503 is a drop, whoever's request it answers: one
// client whose requests the upstream refuses with 503 (NGINX's limit_req
// does by default) cuts the limit for every client (docs/overload.md says
// how to keep such clients from the upstream).
func TestOverloadUpstreamRefusals(t *testing.T) {
	for _, code := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			t.Parallel()
			forFronts(t, allFronts, func(t *testing.T, front string) {
				h := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code) }
				g, base, c := overloadFront(t, front, overloadPolicy(learnOne), h)
				for range 1000 { // until a window ends
					if a, err := get(c, t.Context(), base+"/x"); err != nil || a.status != code {
						t.Fatalf("%v %v, want %d", a.status, err, code)
					}
					if s := overloadState(g); s.Limit != 64 || s.Latency != 0 {
						break
					}
				}
				s := overloadState(g)
				if code == http.StatusTooManyRequests && (s.Limit != 64 || s.Latency == 0) {
					t.Errorf("after 429s: %+v; want a latency learnt, and the limit at 64", s)
				}
				if code == http.StatusServiceUnavailable && (s.Limit >= 64 || s.Latency != 0) {
					t.Errorf("after 503s: %+v; want the limit cut, and no latency learnt", s)
				}
			})
		})
	}
}

// TestOverloadOneTenantsRefusalsCutNothing: a client whose own requests
// the upstream refuses with 503 (its rate limit for that client), beside
// others it answers, does not cut the adaptive limit: the window's drops
// of its one tenant are left out of the drop ratio. When the upstream
// refuses every tenant, or the tenant is alone on the route, its 503s cut
// the limit as before (TestOverloadUpstreamRefusals). Before, one tenant
// sending half of the requests, all refused, cut the limit window after
// window, down to min, for everyone. The upstream's 2 ms and the
// tolerance of 100 keep latency from cutting (a loaded machine's answers
// vary): only drops can.
func TestOverloadOneTenantsRefusalsCutNothing(t *testing.T) {
	for _, everyone := range []bool{false, true} {
		t.Run(map[bool]string{false: "one tenant refused", true: "every tenant refused"}[everyone], func(t *testing.T) {
			t.Parallel()
			forFronts(t, allFronts, func(t *testing.T, front string) {
				h := func(w http.ResponseWriter, r *http.Request) {
					time.Sleep(2 * time.Millisecond)
					if everyone || r.Header.Get("X-Tenant") == "noisy" {
						w.WriteHeader(http.StatusServiceUnavailable)
						return
					}
					_, _ = io.WriteString(w, "ok")
				}
				g, base, c := overloadFront(t, front, overloadPolicy(`
adaptive: {min: 1, max: 64, initial: 64, window: 1ms, min_samples: 20, tolerance: 100}
tier: critical
tenant: header:X-Tenant`), h)
				windows := 0
				last := overloadState(g).Latency
				for i := range 2000 {
					tenant := []string{"noisy", "calm"}[i%2]
					if _, err := get(c, t.Context(), base+"/x", "X-Tenant", tenant); err != nil {
						t.Fatal(err)
					}
					s := overloadState(g)
					if s.Limit < 64 || s.Latency != last {
						windows++
						last = s.Latency
					}
					if windows >= 3 || s.Limit < 64 {
						break
					}
				}
				s := overloadState(g)
				switch {
				case !everyone && (s.Limit != 64 || windows < 3):
					t.Errorf("one tenant's 503s beside another's 200s, %d windows: %+v; want the limit at 64", windows, s)
				case everyone && s.Limit >= 64:
					t.Errorf("every tenant's requests refused: %+v; want the limit cut", s)
				}
			})
		})
	}
}

// BenchmarkOverloadExpensiveTenant measures what one tenant sending
// expensive requests (the upstream answers them in 200 ms or 1 s) at 80
// at once does to three tenants sending cheap ones (50 ms, four at once
// each) under the adaptive limit of a route with a queue: their answers a
// second alone and beside it, the limit alone, the lowest beside it and
// the limit at the end.
// An experiment of some 15 s a case, run by hand:
//
//	go test ./gateway -run '^$' -bench OverloadExpensiveTenant -benchtime 1x
func BenchmarkOverloadExpensiveTenant(b *testing.B) {
	for _, heavy := range []time.Duration{200 * time.Millisecond, time.Second} {
		b.Run(heavy.String(), func(b *testing.B) {
			for range b.N {
				expensiveTenant(b, heavy)
			}
		})
	}
}

func expensiveTenant(b *testing.B, heavy time.Duration) {
	h := func(w http.ResponseWriter, r *http.Request) {
		d := 50 * time.Millisecond
		if r.Header.Get("X-Tenant") == "heavy" {
			d = heavy
		}
		select {
		case <-time.After(d):
			_, _ = io.WriteString(w, "ok")
		case <-r.Context().Done():
		}
	}
	p := compilePolicy(b, "overload.yaml", overloadPolicy(`
adaptive: {min: 2, max: 64, initial: 16, min_samples: 20}
tiers: [{name: default}]
tenant: header:X-Tenant
queue: {size: 64, per_tenant: 32, max_wait: 2s}`))
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
	if err != nil {
		b.Fatal(err)
	}
	g, base, c := startFront(b, frontNetHTTP, Options{Matcher: pm, Engine: memEngine(b)}, h)
	ctx, cancel := context.WithCancel(b.Context())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	var ok, shed atomic.Int64
	loop := func(tenant string, count bool) {
		wg.Go(func() {
			for ctx.Err() == nil {
				a, err := get(c, ctx, base+"/x", "X-Tenant", tenant)
				switch {
				case err != nil || !count:
				case a.status == 200:
					ok.Add(1)
				default:
					shed.Add(1)
				}
			}
		})
	}
	for i := range 12 {
		loop([]string{"a", "b", "c"}[i%3], true)
	}
	measure := func(warm, span time.Duration) (perSec float64, shedN int64, low, end int) {
		time.Sleep(warm)
		ok0, shed0 := ok.Load(), shed.Load()
		low = math.MaxInt
		start := time.Now()
		for time.Since(start) < span {
			time.Sleep(100 * time.Millisecond)
			low = min(low, overloadState(g).Limit)
		}
		return float64(ok.Load()-ok0) / time.Since(start).Seconds(), shed.Load() - shed0, low, overloadState(g).Limit
	}
	alone, _, _, before := measure(3*time.Second, 3*time.Second)
	for range 80 {
		loop("heavy", false)
	}
	beside, shedN, low, end := measure(time.Second, 8*time.Second)
	b.ReportMetric(float64(before), "limit-alone")
	b.ReportMetric(alone, "cheap-ok/s-alone")
	b.ReportMetric(beside, "cheap-ok/s-beside")
	b.ReportMetric(float64(shedN), "cheap-shed")
	b.ReportMetric(float64(low), "limit-min")
	b.ReportMetric(float64(end), "limit-end")
}

// TestOverloadShareAllocs: counting each tenant's places adds no
// allocation to a request admitted at once on a route with a queue,
// whatever names its tenants.
func TestOverloadShareAllocs(t *testing.T) {
	if racecheck.Enabled {
		t.Skip("under the race detector sync.Pool drops items at random: allocations are not counted")
	}
	allocs := map[string]float64{}
	for _, c := range []struct{ name, block string }{
		{"none", ""},
		{"limit", "{limit: 100000}"},
		{"client_ip", "{limit: 100000, queue: {size: 8, max_wait: 1s}}"},
		{"header", "{limit: 100000, tenant: 'header:X-Tenant', queue: {size: 8, max_wait: 1s}}"},
	} {
		g := policyGateway(t, overloadBenchPolicy(c.block), nil, nil)
		h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
		r := httptest.NewRequest("GET", "/x", nil)
		r.Header.Set("X-Tenant", "acme")
		w := &discardWriter{h: http.Header{}}
		allocs[c.name] = math.MaxFloat64
		for range 5 { // the least of a few runs: other tests' goroutines allocate too
			allocs[c.name] = min(allocs[c.name], testing.AllocsPerRun(200, func() {
				clear(w.h)
				h.ServeHTTP(w, r)
				if w.code != 200 {
					t.Fatalf("status %d", w.code)
				}
			}))
		}
	}
	if allocs["client_ip"] > allocs["limit"] || allocs["header"] > allocs["limit"] || allocs["limit"] > allocs["none"] {
		t.Errorf("allocations per request: %v; counting tenants added some", allocs)
	}
}

// TestOverloadLowestTiersNeverStarve: a cap of 1 (a fixed limit: 1, or an
// adaptive limit at its default min of 1, where an upstream that failed
// leaves it) with the default tiers still admits a default-tier request
// when nothing is in flight, and the adaptive limit learns from it and
// grows back. Before, the critical tier's reserve (⌈0.1 · 1⌉) took the
// only place: every default-tier request was shed, and with no request
// forwarded the adaptive limit never learnt again, so the route answered
// 503 for good once an upstream's failures had cut it to 1. An explanation
// of such a request says it is admitted.
func TestOverloadLowestTiersNeverStarve(t *testing.T) {
	for _, c := range []struct{ name, block string }{
		{"fixed", "limit: 1"},
		{"adaptive", "adaptive: {max: 8, initial: 1, window: 1ms, min_samples: 5}"},
		{"adaptive after failures", "adaptive: {max: 8, initial: 8, window: 1ms, min_samples: 5}"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			forFronts(t, allFronts, func(t *testing.T, front string) {
				var up atomic.Bool
				up.Store(c.name != "adaptive after failures")
				h := func(w http.ResponseWriter, r *http.Request) {
					if !up.Load() {
						w.WriteHeader(http.StatusBadGateway)
						return
					}
					_, _ = io.WriteString(w, "ok")
				}
				g, base, cl := overloadFront(t, front, overloadPolicy(c.block), h)
				if !up.Load() {
					// The upstream fails until the limit is at its min.
					for i := 0; ; i++ {
						if i == 2000 {
							t.Fatalf("2000 failures, the limit not at 1: %+v", overloadState(g))
						}
						if _, err := get(cl, t.Context(), base+"/x"); err != nil {
							t.Fatal(err)
						}
						if s := overloadState(g); s.Adaptive && s.Limit == 1 {
							break
						}
					}
					up.Store(true)
				}
				for i := range 200 {
					a, err := get(cl, t.Context(), base+"/x")
					if err != nil || a.status != http.StatusOK {
						t.Fatalf("request %d of the default tier, nothing in flight: %v %v (%+v); want 200", i, a.status, err, overloadState(g))
					}
					if s := overloadState(g); s.Adaptive && s.Limit > 1 {
						return
					}
				}
				if s := overloadState(g); s.Adaptive {
					t.Errorf("after 200 answers: %+v; want the adaptive limit grown past 1", s)
				}
				// An explanation says what admission does.
				e, err := g.Explain(t.Context(), httptestRequest(t, "/x"), ExplainOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if o := e.Overload; o == nil || o.Tier != "default" || o.Ceiling != 1 || !o.Admit {
					t.Errorf("explained at a cap of 1: %+v; want the default tier admitted, ceiling 1", o)
				}
			})
		})
	}
}

// TestOverloadTenantFullDisplacesNothing: a request refused because its
// tenant's backlog is full takes no one's place: with the queue full, a
// more critical request of a tenant that already waits with its
// per_tenant requests is refused at once (tenant_full) and the less
// critical waiter stays queued, to be served. Otherwise one tenant could
// shed every waiter of the tiers below its own, a request each, while
// never holding more than its backlog.
func TestOverloadTenantFullDisplacesNothing(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		h := startHeldFront(t, front, "server:\n  trusted_proxies: [127.0.0.1/32]\n"+overloadPolicy(`
limit: 1
tier_header: X-Priority
tiers:
  - {name: critical}
  - {name: default}
  - {name: sheddable}
tenant: header:X-Tenant
queue: {size: 2, per_tenant: 1, max_wait: 30s}`))
		send := func(who, tier, tenant string) { h.send(t, who, "X-Priority", tier, "X-Tenant", tenant) }
		send("held", "sheddable", "holder")
		pollUntil(t, "1 in flight", func() bool { return h.u.now.Load() == 1 })
		send("victim", "sheddable", "victim")
		pollUntil(t, "1 queued", func() bool { return overloadState(h.g).Queued == 1 })
		send("c1", "critical", "attacker")
		pollUntil(t, "2 queued", func() bool { return overloadState(h.g).Queued == 2 })
		// The queue is full and the attacker's backlog too: its next
		// critical request is refused for its backlog, and takes nobody's
		// place.
		a, err := get(h.c, t.Context(), h.base+"/x", "X-Priority", "critical", "X-Tenant", "attacker", "X-Who", "c2")
		if err != nil {
			t.Fatal(err)
		}
		checkShed(t, a, "30")
		if got := h.obs.get(ShedTenantFull); got != 1 {
			t.Errorf("%d refused as tenant_full, want 1", got)
		}
		if got := h.obs.get(ShedDisplaced); got != 0 {
			t.Errorf("%d waiters displaced by a request refused for its own backlog, want 0", got)
		}
		if s := overloadState(h.g); s.Queued != 2 || s.Inflight != 1 {
			t.Errorf("state %+v, want 1 in flight and 2 queued", s)
		}
		answers := h.release()
		for who, code := range map[string]int{"held": 200, "victim": 200, "c1": 200} {
			if answers[who] != code {
				t.Errorf("%s: status %d, want %d (all: %v)", who, answers[who], code, answers)
			}
		}
	})
}

// TestOverloadUnknownKeysAreNoTenants: on a route whose overload control
// counts tenants by API key and that does not require a key, a client
// that sends a new made-up key with each request is not a new tenant
// each time: unknown keys name no tenant (as a request without a key), so
// its requests share one backlog (per_tenant) and cannot fill the queue
// ahead of a real key's request.
func TestOverloadUnknownKeysAreNoTenants(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		src := `
server:
  api_key_header: x-api-key
plans:
  - {name: gold, rate: 1000000, burst: 1000000}
keys:
  - {name: acme, plan: gold, sha256: "6371cb7a907cc8f10740229732c4b6164b285169494b85304468313513427878"}
  - {name: beta, plan: gold, sha256: "d40ab4efae8afe82f0fda0f0fc785ff61bec7b5f329c6070c453594397e03568"}
` + overloadPolicy(`
limit: 1
tiers: [{name: default}]
tenant: api_key
queue: {size: 3, per_tenant: 1, max_wait: 30s}`)
		h := startHeldFront(t, front, src)
		h.send(t, "held", "x-api-key", "secret")
		pollUntil(t, "1 in flight", func() bool { return h.u.now.Load() == 1 })
		// The attacker: three requests, each with a key of its own making.
		for i := range 3 {
			h.send(t, fmt.Sprintf("guess%d", i), "x-api-key", fmt.Sprintf("made-up-%d", i))
		}
		pollUntil(t, "the attacker's requests queued or refused", func() bool {
			return overloadState(h.g).Queued+h.obs.get(ShedTenantFull)+h.obs.get(ShedQueueFull) == 3
		})
		if s := overloadState(h.g); s.Queued != 1 || h.obs.get(ShedTenantFull) != 2 {
			t.Errorf("made-up keys: %d queued, %d refused as tenant_full; want 1 and 2 (one backlog, per_tenant 1)",
				s.Queued, h.obs.get(ShedTenantFull))
		}
		// A real key's request finds a place in the queue.
		h.send(t, "victim", "x-api-key", "beta-secret")
		pollUntil(t, "the victim queued or refused", func() bool {
			_, done := h.status("victim")
			return done || overloadState(h.g).Queued == 2
		})
		answers := h.release()
		if answers["victim"] != http.StatusOK {
			t.Errorf("the real key's request: status %d, want 200 (all: %v; %d shed as queue_full)", answers["victim"], answers, h.obs.get(ShedQueueFull))
		}
	})
}

// heldFront is a front under an overload policy over an upstream that
// holds every request until released; the requests sent in the
// background keep their statuses by name.
type heldFront struct {
	g    *Gateway
	base string
	c    *http.Client
	u    *holdingUpstream
	obs  *shedReasons

	wg      sync.WaitGroup
	once    sync.Once
	mu      sync.Mutex // guards answers
	answers map[string]int
}

// startHeldFront starts front with the policy src; the held requests
// are let go when the test ends, if it has not done so.
func startHeldFront(t *testing.T, front, src string) *heldFront {
	t.Helper()
	h := &heldFront{u: newHolding(), obs: &shedReasons{}, answers: map[string]int{}}
	pm, err := NewPolicyMatcher(Fixed(compilePolicy(t, "overload.yaml", src)), PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.g, h.base, h.c = startFront(t, front, Options{Matcher: pm, Engine: memEngine(t), Observer: h.obs}, h.u.ServeHTTP)
	t.Cleanup(func() { h.release() })
	return h
}

// send makes a request in the background with the header fields kv
// (name, value ...), its status kept as who's.
func (h *heldFront) send(t *testing.T, who string, kv ...string) {
	h.wg.Go(func() {
		a, err := get(h.c, t.Context(), h.base+"/x", append(kv, "X-Who", who)...)
		if err != nil {
			t.Error(err)
		}
		h.mu.Lock()
		h.answers[who] = a.status
		h.mu.Unlock()
	})
}

// status returns who's status, and whether its answer came.
func (h *heldFront) status(who string) (int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st, ok := h.answers[who]
	return st, ok
}

// release lets the held requests go, waits for every answer and returns
// the statuses by name.
func (h *heldFront) release() map[string]int {
	h.once.Do(func() { close(h.u.release) })
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.answers)
}

// TestOverloadPlanTierOnlyWhereCovered: a plan's tier is its keys' tier
// on the routes the plan covers, and nowhere else. A key of a critical
// plan that covers another route, sent on a route that does not require
// a key, is a request of the route's tier there: it does not pass the
// route's own requests waiting before it (nor take the places kept for
// critical requests), which its plan's rate does not even count.
func TestOverloadPlanTierOnlyWhereCovered(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		src := `
server:
  api_key_header: x-api-key
plans:
  - {name: gold, rate: 1000000, burst: 1000000, tier: critical, routes: [gold]}
keys:
  - {name: acme, plan: gold, sha256: "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"}
routes:
  - name: gold
    match: {paths: ["/gold/**"]}
    upstream: http://127.0.0.1:9
    overload:
      limit: 1
      tiers: [{name: critical, reserve: 0.5}, {name: default}]
      queue: {size: 8, per_tenant: 8, max_wait: 30s}
  - name: api
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:9
    overload:
      limit: 1
      tiers: [{name: critical, reserve: 0.5}, {name: default}]
      queue: {size: 8, per_tenant: 8, max_wait: 30s}
limits:
  - {name: per-ip, rate: 1000000000, burst: 1000000000}
`
		for _, tc := range []struct {
			route, path string
			want        []string // the order in which the upstream saw them
		}{
			{"api", "/x", []string{"first", "plain", "keyed"}},       // not covered: the route's tier
			{"gold", "/gold/x", []string{"first", "keyed", "plain"}}, // covered: the plan's tier
		} {
			t.Run(tc.route, func(t *testing.T) {
				h := startHeldFront(t, front, src)
				send := func(who string, kv ...string) {
					h.wg.Go(func() {
						a, err := get(h.c, t.Context(), h.base+tc.path, append(kv, "X-Who", who)...)
						if err != nil {
							t.Error(err)
						}
						h.mu.Lock()
						h.answers[who] = a.status
						h.mu.Unlock()
					})
				}
				send("first")
				pollUntil(t, "1 in flight", func() bool { return h.u.now.Load() == 1 })
				send("plain")
				pollUntil(t, "1 queued", func() bool { return overloadState(h.g).Queued == 1 })
				send("keyed", "x-api-key", "secret")
				pollUntil(t, "2 queued", func() bool { return overloadState(h.g).Queued == 2 })
				answers := h.release()
				h.u.mu.Lock()
				seen := slices.Clone(h.u.seen)
				h.u.mu.Unlock()
				if !slices.Equal(seen, tc.want) {
					t.Errorf("route %s: the upstream saw %v, want %v (answers %v)", tc.route, seen, tc.want, answers)
				}
			})
		}
	})
}

// TestOverloadUserTenantsWithoutUserLimits: on a route whose tenants are
// its users (tenant: user) and whose limits count nothing per user, each
// user is still a tenant of its own. The token was verified only for a
// limit that counts per user, so every user's request was the one
// anonymous tenant: one user's backlog refused everyone else's
// (tenant_full) and nobody was served in turn. A token that does not
// verify names no user there, and is not refused for it.
func TestOverloadUserTenantsWithoutUserLimits(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		k := newTokenKit(t)
		src := fmt.Sprintf(`
server:
  user:
    jwt: {alg: RS256, key_file: %q}
`, k.pemPath) + overloadPolicy(`
limit: 1
tiers: [{name: default}]
tenant: user
queue: {size: 8, per_tenant: 1, max_wait: 30s}`)
		h := startHeldFront(t, front, src)
		bearer := func(sub string, key any) string {
			s, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()}).SignedString(key)
			if err != nil {
				t.Fatal(err)
			}
			return "Bearer " + s
		}
		h.send(t, "alice", "Authorization", bearer("alice", k.key))
		pollUntil(t, "1 in flight", func() bool { return h.u.now.Load() == 1 })
		h.send(t, "bob", "Authorization", bearer("bob", k.key))
		pollUntil(t, "bob queued", func() bool { return overloadState(h.g).Queued == 1 })
		h.send(t, "carol", "Authorization", bearer("carol", k.key))
		pollUntil(t, "carol queued or shed", func() bool {
			return overloadState(h.g).Queued+h.obs.get(ShedTenantFull) == 2
		})
		// A forged token naming carol is no user: the anonymous tenant,
		// whose backlog is free, and not refused for its token.
		h.send(t, "forged", "Authorization", bearer("carol", k.forger))
		pollUntil(t, "the forged token's request queued or shed", func() bool {
			return overloadState(h.g).Queued+h.obs.get(ShedTenantFull) == 3
		})
		if n := h.obs.get(ShedTenantFull); n != 0 {
			t.Errorf("%d requests refused as tenant_full, want 0: each user is a tenant of its own", n)
		}
		answers := h.release()
		for _, who := range []string{"alice", "bob", "carol", "forged"} {
			if answers[who] != http.StatusOK {
				t.Errorf("%s: status %d, want 200 (all: %v)", who, answers[who], answers)
			}
		}
	})
}

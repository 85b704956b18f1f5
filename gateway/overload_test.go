package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/internal/promtest"
	"github.com/floodgate/floodgate/metrics"
)

// overloadFront serves the policy src on front, every route's requests
// reaching h (the middleware's next handler, or a loopback upstream).
func overloadFront(t *testing.T, front, src string, h http.HandlerFunc) (*Gateway, string, *http.Client) {
	t.Helper()
	p := compilePolicy(t, "overload.yaml", src)
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return startFront(t, front, Options{Matcher: pm, Engine: memEngine(t)}, h)
}

// overloadState returns the state of the gateway's only controller.
func overloadState(g *Gateway) (s OverloadStat) {
	g.OverloadStats(func(o OverloadStat) { s = o })
	return s
}

// pollUntil polls cond 2,000 times, 10 ms apart (20 s on an idle
// machine, longer on a loaded one).
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 2000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// pollUntilFor polls cond until it holds or d has passed.
func pollUntilFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}

// holdingUpstream holds every request until release is closed, and
// counts how many it holds and the most it held at once.
type holdingUpstream struct {
	release  chan struct{}
	now, top atomic.Int64
	served   atomic.Int64
	mu       sync.Mutex
	seen     []string // the X-Who of each request, in arrival order
}

func newHolding() *holdingUpstream { return &holdingUpstream{release: make(chan struct{})} }

func (u *holdingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := u.now.Add(1)
	for {
		top := u.top.Load()
		if n <= top || u.top.CompareAndSwap(top, n) {
			break
		}
	}
	u.mu.Lock()
	u.seen = append(u.seen, r.Header.Get("X-Who"))
	u.mu.Unlock()
	<-u.release
	u.now.Add(-1)
	u.served.Add(1)
	_, _ = io.WriteString(w, "ok")
}

// get sends a GET with headers, returning the answer or the error.
func get(c *http.Client, ctx context.Context, url string, hdr ...string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return answer{}, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}, nil
}

// getLater sends a GET on a goroutine of its own, returning where its
// answer comes (an error fails the test and gives the zero answer).
func getLater(t *testing.T, c *http.Client, url string, hdr ...string) <-chan answer {
	t.Helper()
	ch := make(chan answer, 1)
	go func() {
		a, err := get(c, t.Context(), url, hdr...)
		if err != nil {
			t.Error(err)
		}
		ch <- a
	}()
	return ch
}

const overloadRoute = `
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:9
    overload:
%s
limits:
  - {name: per-ip, rate: 1000000000, burst: 1000000000}
`

func overloadPolicy(block string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(strings.TrimSpace(block), "\n") {
		b.WriteString("      " + line + "\n")
	}
	return fmt.Sprintf(overloadRoute, strings.TrimRight(b.String(), "\n"))
}

// TestOverloadCapQueues: with a cap of 2 and six slow requests at once,
// two reach the upstream and four wait; all six are served, never more
// than two at once.
func TestOverloadCapQueues(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		u := newHolding()
		g, base, c := overloadFront(t, front, overloadPolicy(`
limit: 2
tiers: [{name: default}]
queue: {size: 16, per_tenant: 8, max_wait: 30s}`), u.ServeHTTP)
		var wg sync.WaitGroup
		codes := make(chan int, 6)
		for range 6 {
			wg.Go(func() {
				a, err := get(c, t.Context(), base+"/x")
				if err != nil {
					t.Error(err)
				}
				codes <- a.status
			})
		}
		pollUntil(t, "2 in flight and 4 queued", func() bool {
			s := overloadState(g)
			return s.Inflight == 2 && s.Queued == 4 && u.now.Load() == 2
		})
		close(u.release)
		wg.Wait()
		close(codes)
		for code := range codes {
			if code != 200 {
				t.Errorf("status %d, want 200", code)
			}
		}
		if top := u.top.Load(); top != 2 {
			t.Errorf("the upstream held %d at once, want 2", top)
		}
		if s := overloadState(g); s.Inflight != 0 || s.Queued != 0 || s.Limit != 2 {
			t.Errorf("after: %+v", s)
		}
	})
}

// TestOverloadShed: a request over the cap is refused with 503 and
// Retry-After when the queue is full, when its max_wait passes, and at
// once on a route without a queue; the RateLimit fields stay.
func TestOverloadShed(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		u := newHolding()
		g, base, c := overloadFront(t, front, overloadPolicy(`
limit: 2
tiers: [{name: default}]
queue: {size: 1, max_wait: 1500ms}`), u.ServeHTTP)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				if a, err := get(c, t.Context(), base+"/held"); err != nil || a.status != 200 {
					t.Errorf("held request: %v %v", a.status, err)
				}
			})
		}
		pollUntil(t, "2 in flight", func() bool { return u.now.Load() == 2 })
		queued := make(chan answer, 1)
		start := time.Now()
		go func() {
			a, err := get(c, t.Context(), base+"/queued")
			if err != nil {
				t.Error(err)
			}
			queued <- a
		}()
		pollUntil(t, "1 queued", func() bool { return overloadState(g).Queued == 1 })
		full, err := get(c, t.Context(), base+"/full")
		if err != nil {
			t.Fatal(err)
		}
		checkShed(t, full, "2")
		timedOut := <-queued
		checkShed(t, timedOut, "2")
		if time.Since(start) < 1500*time.Millisecond {
			t.Errorf("the queued request was refused after %v, before its max_wait", time.Since(start))
		}
		close(u.release)
		wg.Wait()
		if n := u.served.Load(); n != 2 {
			t.Errorf("the upstream served %d, want 2", n)
		}
	})
	forFronts(t, allFronts, func(t *testing.T, front string) {
		u := newHolding()
		_, base, c := overloadFront(t, front, overloadPolicy(`
limit: 1
tier: critical`), u.ServeHTTP)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if _, err := get(c, t.Context(), base+"/held"); err != nil {
				t.Error(err)
			}
		}()
		pollUntil(t, "1 in flight", func() bool { return u.now.Load() == 1 })
		a, err := get(c, t.Context(), base+"/refused")
		if err != nil {
			t.Fatal(err)
		}
		checkShed(t, a, "1")
		close(u.release)
		<-done
	})
}

func checkShed(t *testing.T, a answer, retry string) {
	t.Helper()
	if a.status != http.StatusServiceUnavailable || a.body != string(bodyUnavailable) {
		t.Errorf("answer %d %q, want 503 %q", a.status, a.body, bodyUnavailable)
	}
	if got := a.header.Get("Retry-After"); got != retry {
		t.Errorf("Retry-After %q, want %q", got, retry)
	}
	if a.header.Get("RateLimit") == "" || a.header.Get("RateLimit-Policy") == "" {
		t.Errorf("the RateLimit fields are missing: %v", a.header)
	}
}

// TestOverloadTiers: at the cap of the lowest tier, a sheddable request
// is shed while a critical one is admitted into the capacity reserved
// for it.
func TestOverloadTiers(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		u := newHolding()
		src := "server:\n  trusted_proxies: [127.0.0.1/32]\n" + overloadPolicy(`
limit: 10
tier_header: X-Priority
tiers:
  - {name: critical, reserve: 0.2}
  - {name: default, reserve: 0.1}
  - {name: sheddable}`)
		g, base, c := overloadFront(t, front, src, u.ServeHTTP)
		var wg sync.WaitGroup
		// The ceiling of sheddable is 10 − ⌈10·0.3⌉ = 7.
		for range 7 {
			wg.Go(func() {
				if a, err := get(c, t.Context(), base+"/s", "X-Priority", "sheddable"); err != nil || a.status != 200 {
					t.Errorf("sheddable in flight: %v %v", a.status, err)
				}
			})
		}
		pollUntil(t, "7 in flight", func() bool { return u.now.Load() == 7 })
		a, err := get(c, t.Context(), base+"/s", "X-Priority", "sheddable")
		if err != nil {
			t.Fatal(err)
		}
		checkShed(t, a, "1")
		// Unknown names are the route's tier (default: ceiling 8).
		wg.Go(func() {
			if a, err := get(c, t.Context(), base+"/d", "X-Priority", "nonsense", "X-Who", "default"); err != nil || a.status != 200 {
				t.Errorf("default: %v %v", a.status, err)
			}
		})
		pollUntil(t, "8 in flight", func() bool { return u.now.Load() == 8 })
		a, err = get(c, t.Context(), base+"/d", "X-Who", "default")
		if err != nil {
			t.Fatal(err)
		}
		checkShed(t, a, "1")
		for range 2 {
			wg.Go(func() {
				if a, err := get(c, t.Context(), base+"/c", "X-Priority", "critical", "X-Who", "critical"); err != nil || a.status != 200 {
					t.Errorf("critical: %v %v", a.status, err)
				}
			})
		}
		pollUntil(t, "10 in flight", func() bool { return u.now.Load() == 10 })
		if s := overloadState(g); s.Inflight != 10 {
			t.Errorf("state %+v", s)
		}
		close(u.release)
		wg.Wait()
	})
}

// TestOverloadTierHeaderUntrusted: the tier header of a peer that is not
// a trusted proxy is not read.
func TestOverloadTierHeaderUntrusted(t *testing.T) {
	u := newHolding()
	_, base, c := overloadFront(t, frontNetHTTP, overloadPolicy(`
limit: 10
tier_header: X-Priority
tier: sheddable`), u.ServeHTTP)
	var wg sync.WaitGroup
	for range 8 { // sheddable's ceiling: 10 − ⌈10·0.2⌉
		wg.Go(func() { _, _ = get(c, t.Context(), base+"/s") })
	}
	pollUntil(t, "8 in flight", func() bool { return u.now.Load() == 8 })
	a, err := get(c, t.Context(), base+"/c", "X-Priority", "critical")
	if err != nil {
		t.Fatal(err)
	}
	checkShed(t, a, "1")
	close(u.release)
	wg.Wait()
}

// TestOverloadFairQueue: a tenant with twenty times the requests of
// another does not make the other wait behind its backlog.
func TestOverloadFairQueue(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		gate := make(chan struct{})
		var mu sync.Mutex
		var order []string
		h := func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			order = append(order, r.Header.Get("X-Tenant"))
			mu.Unlock()
			<-gate
			_, _ = io.WriteString(w, "ok")
		}
		g, base, c := overloadFront(t, front, overloadPolicy(`
limit: 1
tiers: [{name: default}]
tenant: header:X-Tenant
queue: {size: 64, per_tenant: 32, max_wait: 60s}`), h)
		var wg sync.WaitGroup
		send := func(tenant string) {
			wg.Go(func() {
				if a, err := get(c, t.Context(), base+"/x", "X-Tenant", tenant); err != nil || a.status != 200 {
					t.Errorf("%s: %v %v", tenant, a.status, err)
				}
			})
		}
		send("heavy")
		pollUntil(t, "1 in flight", func() bool { return overloadState(g).Inflight == 1 })
		for i := range 20 {
			send("heavy")
			pollUntil(t, "heavy queued", func() bool { return overloadState(g).Queued == i+1 })
		}
		send("light")
		pollUntil(t, "light queued", func() bool { return overloadState(g).Queued == 21 })
		for range 22 {
			gate <- struct{}{}
		}
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		at := slices.Index(order, "light")
		if at < 0 || at > 2 {
			t.Errorf("the light tenant was served at %d of %d (%v); want within its first turn", at, len(order), order)
		}
	})
}

// TestOverloadQueuedClientLeaves: a client that leaves while queued frees
// its place and never reaches the upstream.
func TestOverloadQueuedClientLeaves(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		u := newHolding()
		g, base, c := overloadFront(t, front, overloadPolicy(`
limit: 1
tiers: [{name: default}]
queue: {size: 4, per_tenant: 4, max_wait: 60s}`), u.ServeHTTP)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = get(c, t.Context(), base+"/held")
		}()
		pollUntil(t, "1 in flight", func() bool { return u.now.Load() == 1 })
		ctx, cancel := context.WithCancel(t.Context())
		left := make(chan error, 1)
		go func() {
			_, err := get(c, ctx, base+"/leaves")
			left <- err
		}()
		pollUntil(t, "1 queued", func() bool { return overloadState(g).Queued == 1 })
		cancel()
		if err := <-left; !errors.Is(err, context.Canceled) {
			t.Errorf("client error %v", err)
		}
		pollUntil(t, "the queue empty", func() bool { return overloadState(g).Queued == 0 })
		close(u.release)
		<-done
		if a, err := get(c, t.Context(), base+"/after"); err != nil || a.status != 200 {
			t.Fatalf("after: %v %v", a.status, err)
		}
		if n := u.served.Load(); n != 2 {
			t.Errorf("the upstream served %d, want 2 (the one that left never reached it)", n)
		}
		if s := overloadState(g); s.Inflight != 0 || s.Queued != 0 {
			t.Errorf("after: %+v", s)
		}
	})
}

// TestOverloadAdaptive: an upstream of four workers whose latency rises
// with the requests waiting for them makes the adaptive limit fall below
// its maximum.
func TestOverloadAdaptive(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		workers := make(chan struct{}, 4)
		h := func(w http.ResponseWriter, r *http.Request) {
			workers <- struct{}{}
			time.Sleep(2 * time.Millisecond)
			<-workers
			_, _ = io.WriteString(w, "ok")
		}
		g, base, c := overloadFront(t, front, overloadPolicy(`
adaptive: {min: 1, max: 64, initial: 64, window: 50ms, min_samples: 20}
tier: critical`), h)
		var stop atomic.Bool
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for i := 0; i < 2000 && !stop.Load(); i++ {
					a, err := get(c, t.Context(), base+"/x")
					if err != nil {
						t.Error(err)
						return
					}
					if a.status != 200 && a.status != http.StatusServiceUnavailable {
						t.Errorf("status %d", a.status)
						return
					}
					if overloadState(g).Limit < 64 {
						stop.Store(true)
					}
				}
			})
		}
		wg.Wait()
		if s := overloadState(g); s.Limit >= 64 || !s.Adaptive {
			t.Errorf("the limit stayed at %+v", s)
		}
	})
}

// TestOverloadObserved: a shed request is counted by route, tier, reason
// and tenant, its access record says shed, why and its tier, and the
// controller's gauges are read at a scrape.
func TestOverloadObserved(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		reg := prometheus.NewRegistry()
		m, err := metrics.New(reg, metrics.Options{MaxTenants: 1})
		if err != nil {
			t.Fatal(err)
		}
		sink := &recordSink{}
		u := newHolding()
		p := compilePolicy(t, "overload.yaml", "server:\n  trusted_proxies: [127.0.0.1/32]\n"+overloadPolicy(`
limit: 1
tier: critical
tenant: header:X-Tenant
tier_header: X-Priority`))
		pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, base, c := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t), Observer: m, AccessLog: sink}, u.ServeHTTP)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = get(c, t.Context(), base+"/held")
		}()
		pollUntil(t, "1 in flight", func() bool { return u.now.Load() == 1 })
		for _, tenant := range []string{"a", "b", "c"} {
			a, err := get(c, t.Context(), base+"/shed", "X-Tenant", tenant)
			if err != nil {
				t.Fatal(err)
			}
			checkShed(t, a, "1")
		}
		rec := sink.last(t)
		if rec.Status != 503 || rec.Shed != ShedFull || rec.Tier != "critical" || rec.Decision != accesslog.Allow {
			t.Errorf("record: status %d shed %q tier %q decision %v", rec.Status, rec.Shed, rec.Tier, rec.Decision)
		}
		for _, ch := range []struct {
			metric string
			labels promtest.Labels
			want   float64
		}{
			{"floodgate_overload_shed_total", promtest.Labels{"route": "api", "tier": "critical", "reason": "full"}, 3},
			{"floodgate_overload_shed_tenants_total", promtest.Labels{"route": "api", "tenant": "a"}, 1},
			{"floodgate_overload_shed_tenants_total", promtest.Labels{"route": "api", "tenant": metrics.OtherTenant}, 2},
			{"floodgate_overload_limit", promtest.Labels{"route": "api"}, 1},
			{"floodgate_overload_inflight", promtest.Labels{"route": "api"}, 1},
			{"floodgate_overload_queued", promtest.Labels{"route": "api"}, 0},
			{"floodgate_rejections_total", promtest.Labels{"code": "503"}, 3},
		} {
			if got := promtest.Value(t, reg, ch.metric, ch.labels); got != ch.want {
				t.Errorf("%s%v = %v, want %v", ch.metric, ch.labels, got, ch.want)
			}
		}
		close(u.release)
		<-done
		pollUntil(t, "the held request logged", func() bool { return sink.last(t).Path == "/held" })
		if rec := sink.last(t); rec.Shed != "" || rec.Tier != "critical" || rec.Status != 200 {
			t.Errorf("held record: %+v", rec)
		}
	})
}

// TestOverloadExplain: an explanation shows the route's overload control
// and the request's tier and tenant, and never takes a place.
func TestOverloadExplain(t *testing.T) {
	u := newHolding()
	g, base, c := overloadFront(t, frontNetHTTP, overloadPolicy(`
limit: 1
tier: critical
tenant: header:X-Tenant
queue: {size: 4, per_tenant: 2, max_wait: 2s}`), u.ServeHTTP)
	r := httptestRequest(t, "/x", "X-Tenant", "acme")
	e, err := g.Explain(t.Context(), r, ExplainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o := e.Overload
	if o == nil || o.Limit != 1 || o.Inflight != 0 || !o.Admit || o.Tier != "critical" || o.Tenant != "acme" || o.MaxWait != Duration(2*time.Second) {
		t.Fatalf("before: %+v", o)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = get(c, t.Context(), base+"/held")
	}()
	pollUntil(t, "1 in flight", func() bool { return u.now.Load() == 1 })
	for range 3 {
		e, err = g.Explain(t.Context(), r, ExplainOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	if o := e.Overload; o.Inflight != 1 || o.Admit || o.Ceiling != 1 || !e.Answer.Forwarded {
		t.Errorf("at the cap: %+v, answer %+v", o, e.Answer)
	}
	if s := overloadState(g); s.Inflight != 1 || s.Queued != 0 {
		t.Errorf("explanations took places: %+v", s)
	}
	close(u.release)
	<-done
}

func httptestRequest(t *testing.T, path string, hdr ...string) *http.Request {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), "GET", "http://explain"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.RemoteAddr = "127.0.0.1:50000"
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	return r
}

// TestOverloadReload: a reload that keeps a route's overload block keeps
// its controller (and what it holds), one that changes it retunes the
// same controller (what it holds still counted), and a controller idle
// across two reloads is forgotten.
func TestOverloadReload(t *testing.T) {
	g, err := New(Options{Matcher: MatcherFunc(func(*Request, *Match) error { return nil }), Engine: memEngine(t)})
	if err != nil {
		t.Fatal(err)
	}
	route := func(p string) *Match {
		pol := compilePolicy(t, "o.yaml", p)
		return &Match{Route: "api", Overload: pol.Routes()[0].Overload}
	}
	src := overloadPolicy("limit: 4\ntiers: [{name: default}]")
	first := g.controller(route(src).Overload, "api")
	first.mu.Lock()
	first.inflight = 3
	first.mu.Unlock()
	g.ForgetUpstreams()
	same := route(src)
	if c := g.controller(same.Overload, "api"); c != first {
		t.Error("an unchanged route got a new controller after a reload")
	}
	if s, ok := g.OverloadOf(same.Overload); !ok || s.Inflight != 3 || s.Limit != 4 {
		t.Errorf("state after the reload: %+v %v", s, ok)
	}
	g.ForgetUpstreams()
	changed := route(overloadPolicy("limit: 5\ntiers: [{name: default}]"))
	if c := g.controller(changed.Overload, "api"); c != first || c.capacity() != 5 {
		t.Error("a changed route did not keep its controller, retuned")
	}
	if s, ok := g.OverloadOf(changed.Overload); !ok || s.Inflight != 3 || s.Limit != 5 {
		t.Errorf("state after a reload that changed the route: %+v %v", s, ok)
	}
	// A request matched by the older policy, looked up after the reload,
	// does not bring the older settings back.
	if c := g.controller(same.Overload, "api"); c != first || c.capacity() != 5 {
		t.Error("an older policy's route retuned the controller back")
	}
	first.mu.Lock()
	first.inflight = 0
	first.mu.Unlock()
	g.ForgetUpstreams()
	g.ForgetUpstreams()
	n := 0
	g.OverloadStats(func(OverloadStat) { n++ })
	if n != 0 {
		t.Errorf("%d controllers left after two reloads without requests, want 0", n)
	}
}

// TestOverloadControllersBounded: a gateway whose owner never reloads it
// (package guard) keeps a bounded set of controllers however many
// policies its routes come from.
func TestOverloadControllersBounded(t *testing.T) {
	g, err := New(Options{Matcher: MatcherFunc(func(*Request, *Match) error { return nil }), Engine: memEngine(t)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 * maxControllers {
		p := compilePolicy(t, "o.yaml", overloadPolicy(fmt.Sprintf("limit: %d", i+1)))
		g.controller(p.Routes()[0].Overload, "api")
	}
	n := 0
	g.OverloadStats(func(OverloadStat) { n++ })
	if n > maxControllers {
		t.Errorf("%d controllers, want at most %d", n, maxControllers)
	}
	g.ovl.mu.Lock()
	defer g.ovl.mu.Unlock()
	if g.ovl.ptrs > 4*maxControllers {
		t.Errorf("%d policy pointers kept", g.ovl.ptrs)
	}
}

// TestOverloadDisplaces: a request that finds the queue full takes the
// place of the newest waiter of the least critical tier that has one,
// which is shed (503, reason displaced); a request of the lowest tier, or
// one with no less critical waiter, is still refused as queue_full.
func TestOverloadDisplaces(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		u := newHolding()
		src := "server:\n  trusted_proxies: [127.0.0.1/32]\n" + overloadPolicy(`
limit: 1
tier_header: X-Priority
tiers:
  - {name: critical}
  - {name: default}
  - {name: sheddable}
queue: {size: 2, per_tenant: 2, max_wait: 30s}`)
		g, base, c := overloadFront(t, front, src, u.ServeHTTP)
		var wg sync.WaitGroup
		answers := make(map[string]int)
		var mu sync.Mutex
		send := func(who, tier string) {
			wg.Go(func() {
				a, err := get(c, t.Context(), base+"/x", "X-Priority", tier, "X-Who", who)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				answers[who] = a.status
				mu.Unlock()
			})
		}
		send("held", "sheddable")
		pollUntil(t, "1 in flight", func() bool { return u.now.Load() == 1 })
		send("s1", "sheddable")
		pollUntil(t, "1 queued", func() bool { return overloadState(g).Queued == 1 })
		send("d1", "default")
		pollUntil(t, "2 queued", func() bool { return overloadState(g).Queued == 2 })
		// The queue is full: a sheddable request is refused; a critical
		// one displaces s1 (the only waiter below it); a second critical
		// one displaces d1.
		a, err := get(c, t.Context(), base+"/x", "X-Priority", "sheddable")
		if err != nil {
			t.Fatal(err)
		}
		checkShed(t, a, "30")
		send("c1", "critical")
		pollUntil(t, "s1 displaced", func() bool { mu.Lock(); defer mu.Unlock(); return answers["s1"] != 0 })
		send("c2", "critical")
		pollUntil(t, "d1 displaced", func() bool { mu.Lock(); defer mu.Unlock(); return answers["d1"] != 0 })
		// Nothing below critical waits now: a third critical is refused.
		a, err = get(c, t.Context(), base+"/x", "X-Priority", "critical")
		if err != nil {
			t.Fatal(err)
		}
		checkShed(t, a, "30")
		if s := overloadState(g); s.Queued != 2 || s.Inflight != 1 {
			t.Errorf("state %+v, want 1 in flight and 2 queued", s)
		}
		close(u.release)
		wg.Wait()
		want := map[string]int{"held": 200, "s1": 503, "d1": 503, "c1": 200, "c2": 200}
		for who, code := range want {
			if answers[who] != code {
				t.Errorf("%s: status %d, want %d (all: %v)", who, answers[who], code, answers)
			}
		}
		if s := u.seen; !slices.Equal(s, []string{"held", "c1", "c2"}) {
			t.Errorf("the upstream saw %q, want held, c1, c2", s)
		}
	})
}

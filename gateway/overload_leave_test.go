package gateway

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// leaveRacePolicy is a route that admits one request at a time, with a
// queue of one place and two tiers, under a limit of three requests an
// hour per client.
const leaveRacePolicy = `
server:
  trusted_proxies: [127.0.0.1/32]
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:9
    overload:
      limit: 1
      tier_header: X-Priority
      tiers: [{name: critical}, {name: sheddable}]
      tier: sheddable
      queue: {size: 1, per_tenant: 1, max_wait: 60s}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 3}
`

// TestOverloadLeftWhenDisplacedIsClientGone: a waiter whose client left
// at the moment a more critical request displaced it is a client that
// left, whichever the gateway saw first: it is answered nothing (no 503
// to a client that is gone), counted as client_gone, not displaced, and
// its plain charge is refunded as for any client that leaves the queue,
// so the client's next request within its limit of three passes. The
// waiter is held (waitHook) until its client is seen gone and it has been
// displaced, so both have happened when it looks.
func TestOverloadLeftWhenDisplacedIsClientGone(t *testing.T) {
	forFronts(t, proxyFronts, func(t *testing.T, front string) {
		u := newHolding()
		var once sync.Once
		release := func() { once.Do(func() { close(u.release) }) }
		t.Cleanup(release)
		obs := &shedReasons{}
		pm, err := NewPolicyMatcher(Fixed(compilePolicy(t, "overload.yaml", leaveRacePolicy)), PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		up := httptest.NewServer(u)
		t.Cleanup(up.Close)
		pm.upstream, _ = url.Parse(up.URL)
		g, err := New(Options{Matcher: pm, Engine: memEngine(t), Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		seen := make(chan bool, 1) // the first waiter saw its client gone
		proceed := make(chan struct{})
		var first sync.Once
		g.waitHook = func(gone <-chan struct{}) {
			first.Do(func() {
				select {
				case <-gone:
					seen <- true
				case <-time.After(20 * time.Second):
					seen <- false
				}
				<-proceed
			})
		}
		base := serveFront(t, front, g, u.ServeHTTP)
		c := newClient(t)

		held := getLater(t, c, base+"/held", "X-Who", "held")
		pollUntil(t, "the first request to be held", func() bool { return u.now.Load() == 1 })

		conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(conn, "GET /leaves HTTP/1.1\r\nHost: x\r\nX-Priority: sheddable\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		pollUntil(t, "the second request to wait", func() bool { return overloadState(g).Queued == 1 })
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if !<-seen {
			close(proceed)
			t.Fatal("the gateway never saw the waiting client leave")
		}

		critical := getLater(t, c, base+"/critical", "X-Priority", "critical", "X-Who", "critical")
		ctl := g.ovl.byRoute["api"]
		pollUntil(t, "the critical request to displace the waiter", func() bool {
			ctl.mu.Lock()
			defer ctl.mu.Unlock()
			return ctl.queues[0].Len() == 1 && ctl.queues[1].Len() == 0
		})
		close(proceed)

		got, err := io.ReadAll(conn)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the connection of the client that left was kept open; the gateway sent %q", got)
		}
		if len(got) > 0 {
			t.Errorf("a client that left as it was displaced was answered %q, want no answer", firstLine(got))
		}
		pollUntil(t, "the waiter to leave", func() bool { return obs.get(ShedClientGone)+obs.get(ShedDisplaced) == 1 })
		if n, d := obs.get(ShedClientGone), obs.get(ShedDisplaced); n != 1 || d != 0 {
			t.Errorf("shed as client_gone %d, displaced %d; want 1 and 0", n, d)
		}
		release()
		if a := <-held; a.status != http.StatusOK {
			t.Errorf("the held request: %d, want 200", a.status)
		}
		if a := <-critical; a.status != http.StatusOK {
			t.Errorf("the critical request: %d, want 200", a.status)
		}
		// Three charged (held, critical, and the one that left, refunded):
		// the fourth request is within the limit of three.
		a, err := get(c, t.Context(), base+"/after")
		if err != nil {
			t.Fatal(err)
		}
		if a.status != http.StatusOK {
			t.Errorf("the next request: %d, want 200 (the charge of the client that left was kept)", a.status)
		}
		if n := u.served.Load(); n != 3 {
			t.Errorf("the upstream served %d, want 3 (the one that left never reached it)", n)
		}
	})
}

// firstLine returns b's first line.
func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\r\n")
	return s
}

// recordingGate is a gatedUpstream that notes the X-Who of each request
// it is sent.
type recordingGate struct {
	gatedUpstream
	mu   sync.Mutex
	whos []string // guarded by mu
}

func (u *recordingGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.whos = append(u.whos, r.Header.Get("X-Who"))
	u.mu.Unlock()
	u.gatedUpstream.ServeHTTP(w, r)
}

// saw reports whether who's request reached the upstream.
func (u *recordingGate) saw(who string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Contains(u.whos, who)
}

// admitLeavePolicy is a route that admits one request at a time, with a
// queue of two places, under a limit of three requests an hour per client.
const admitLeavePolicy = `
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:9
    overload:
      limit: 1
      tiers: [{name: default}]
      queue: {size: 2, per_tenant: 2, max_wait: 60s}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 3}
`

// TestOverloadLeftWhenAdmittedIsClientGone: a waiter given a place at
// the moment its client left is a client that left: it is not forwarded,
// it gives its place back at once to the next waiter, it is answered
// nothing, counted as client_gone, and its plain charge is refunded, so
// the client's next request within its limit of three passes. The waiter
// is held (waitHook) until its client is seen gone and a place came free
// for it, so both have happened when it looks.
func TestOverloadLeftWhenAdmittedIsClientGone(t *testing.T) {
	forFronts(t, proxyFronts, func(t *testing.T, front string) {
		u := &recordingGate{}
		obs := &shedReasons{}
		pm, err := NewPolicyMatcher(Fixed(compilePolicy(t, "overload.yaml", admitLeavePolicy)), PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		up := httptest.NewServer(u)
		t.Cleanup(up.Close)
		pm.upstream, _ = url.Parse(up.URL)
		g, err := New(Options{Matcher: pm, Engine: memEngine(t), Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		seen := make(chan bool, 1) // the first waiter saw its client gone
		proceed := make(chan struct{})
		var first, proceeded sync.Once
		goOn := func() { proceeded.Do(func() { close(proceed) }) }
		t.Cleanup(goOn)
		g.waitHook = func(gone <-chan struct{}) {
			first.Do(func() {
				select {
				case <-gone:
					seen <- true
				case <-time.After(20 * time.Second):
					seen <- false
				}
				<-proceed
			})
		}
		base := serveFront(t, front, g, u.ServeHTTP)
		c := newClient(t)
		var wg sync.WaitGroup
		answers := make(map[string]int)
		var amu sync.Mutex
		send := func(who string) {
			wg.Go(func() {
				a, err := get(c, t.Context(), base+"/"+who, "X-Who", who)
				if err != nil {
					t.Error(err)
				}
				amu.Lock()
				answers[who] = a.status
				amu.Unlock()
			})
		}
		var released sync.Once
		release := func() {
			released.Do(func() {
				goOn()
				for _, who := range []string{"held", "leaves", "next"} {
					u.open(who)
				}
				wg.Wait()
			})
		}
		defer release()

		send("held")
		pollUntil(t, "the first request to be held", func() bool { return u.holding() == 1 })
		conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(conn, "GET /leaves HTTP/1.1\r\nHost: x\r\nX-Who: leaves\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		pollUntil(t, "the second request to wait", func() bool { return overloadState(g).Queued == 1 })
		send("next")
		pollUntil(t, "the third request to wait", func() bool { return overloadState(g).Queued == 2 })
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if !<-seen {
			t.Fatal("the gateway never saw the waiting client leave")
		}
		// A place comes free: it goes to the waiter whose client left.
		u.open("held")
		pollUntil(t, "the waiter whose client left to be given the place", func() bool {
			s := overloadState(g)
			return s.Inflight == 1 && s.Queued == 1
		})
		goOn()
		pollUntil(t, "a request to reach the upstream", func() bool { return u.saw("next") || u.saw("leaves") })
		if u.saw("leaves") {
			t.Errorf("the request of a client that left as it was given its place reached the upstream")
		}
		u.open("leaves")
		got, err := io.ReadAll(conn)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the connection of the client that left was kept open; the gateway sent %q", got)
		}
		if len(got) > 0 {
			t.Errorf("a client that left as it was given its place was answered %q, want no answer", firstLine(got))
		}
		release()
		if n := obs.get(ShedClientGone); n != 1 {
			t.Errorf("shed as client_gone %d, want 1", n)
		}
		for _, who := range []string{"held", "next"} {
			if answers[who] != http.StatusOK {
				t.Errorf("%s: status %d, want 200", who, answers[who])
			}
		}
		// Three charged (held, next, and the one that left, refunded):
		// the fourth request is within the limit of three.
		u.open("after")
		a, err := get(c, t.Context(), base+"/after", "X-Who", "after")
		if err != nil {
			t.Fatal(err)
		}
		if a.status != http.StatusOK {
			t.Errorf("the next request: %d, want 200 (the charge of the client that left was kept)", a.status)
		}
		if s := overloadState(g); s.Inflight != 0 || s.Queued != 0 {
			t.Errorf("after all: %+v, want nothing in flight or waiting", s)
		}
	})
}

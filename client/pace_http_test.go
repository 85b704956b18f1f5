package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// windowHandler is a fixed window of max requests per w for each path,
// answering with the RateLimit fields as Floodgate's gateway does (a 429
// with a Retry-After past the window when full). It counts its answers.
type windowHandler struct {
	max int
	w   time.Duration

	mu      sync.Mutex
	start   map[string]time.Time
	n       map[string]int
	ok, tmr int
}

func (h *windowHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	now := time.Now()
	if h.start == nil {
		h.start, h.n = map[string]time.Time{}, map[string]int{}
	}
	p := r.URL.Path
	if start := now.Truncate(h.w); !start.Equal(h.start[p]) {
		h.start[p], h.n[p] = start, 0
	}
	allowed := h.n[p] < h.max
	if allowed {
		h.n[p]++
		h.ok++
	} else {
		h.tmr++
	}
	left := h.start[p].Add(h.w).Sub(now)
	remaining := h.max - h.n[p]
	h.mu.Unlock()
	secs := strconv.FormatInt(int64((left+time.Second-1)/time.Second), 10)
	name := `"win` + p + `"`
	w.Header().Set("RateLimit-Policy", fmt.Sprintf(`%s;q=%d;w=%d`, name, h.max, int64(h.w/time.Second)))
	w.Header().Set("RateLimit", fmt.Sprintf(`%s;r=%d;t=%s`, name, remaining, secs))
	if !allowed {
		w.Header().Set("Retry-After", secs)
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (h *windowHandler) counts() (ok, refused int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ok, h.tmr
}

// TestRetryTransportPacesItself: four goroutines sharing one transport
// send 80 requests to a limit of 5 a second. With a Pacer none of them
// meets a 429 after the first answers; without one, many do.
func TestRetryTransportPacesItself(t *testing.T) {
	t.Parallel()
	for _, paced := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			h := &windowHandler{max: 5, w: time.Second}
			rt := &RetryTransport{Base: pipeServer(t, h), MaxAttempts: 1}
			if paced {
				rt.Pacer = NewPacer(PacerOptions{})
			}
			hc := &http.Client{Transport: rt}
			start := time.Now()
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for range 20 {
						resp, err := hc.Get("http://pipe/items")
						if err != nil {
							t.Error(err)
							return
						}
						resp.Body.Close()
						if !paced && resp.StatusCode == http.StatusTooManyRequests {
							time.Sleep(100 * time.Millisecond) // a client that backs off a little
						}
					}
				})
			}
			wg.Wait()
			ok, refused := h.counts()
			t.Logf("paced %v: %d accepted, %d refused in %s", paced, ok, refused, time.Since(start))
			switch {
			case paced && (refused != 0 || ok != 80):
				t.Errorf("paced: %d accepted and %d refused, want 80 and none", ok, refused)
			case paced && time.Since(start) < 15*time.Second:
				t.Errorf("paced: 80 requests at 5 a second took %s, want at least 15s", time.Since(start))
			case !paced && refused == 0:
				t.Errorf("without a Pacer nothing was refused: the test does not load the limit")
			}
			if paced {
				if s := rt.Pacer.Stats(); s.Held == 0 || s.HeldFor == 0 || s.Keys != 1 {
					t.Errorf("stats %+v, want requests held on one key", s)
				}
			}
		})
	}
}

// TestRetryTransportPacesEachRouteByItsPolicy: a used-up policy that only
// /login answers carry holds /login back, not /items of the same host;
// a held request whose deadline comes before the reset fails at once.
func TestRetryTransportPacesEachRouteByItsPolicy(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := &windowHandler{max: 2, w: time.Minute}
		rt := &RetryTransport{Base: pipeServer(t, h), MaxAttempts: 1, Pacer: NewPacer(PacerOptions{})}
		hc := &http.Client{Transport: rt}
		get := func(ctx context.Context, path string) (int, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://pipe"+path, nil)
			resp, err := hc.Do(req)
			if err != nil {
				return 0, err
			}
			resp.Body.Close()
			return resp.StatusCode, nil
		}
		start := time.Now()
		for _, path := range []string{"/items", "/login", "/login"} {
			if code, err := get(context.Background(), path); err != nil || code != 200 {
				t.Fatalf("GET %s: %d %v", path, code, err)
			}
		}
		// /login has nothing left for the rest of the minute.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := get(ctx, "/login")
		var he *HoldError
		if !errors.As(err, &he) || !errors.Is(err, context.DeadlineExceeded) || he.Policy != `win/login` {
			t.Fatalf("GET /login: %v, want a *HoldError for policy win/login past the deadline", err)
		}
		// /items still goes, at once.
		if code, err := get(context.Background(), "/items"); err != nil || code != 200 {
			t.Fatalf("GET /items: %d %v", code, err)
		}
		if el := time.Since(start); el != 0 {
			t.Fatalf("took %s, want no wait at all", el)
		}
		if _, refused := h.counts(); refused != 0 {
			t.Fatalf("%d refused", refused)
		}
	})
}

// TestRetryTransportWaitsForRetryAfterThroughThePacer: a 503 with a
// Retry-After of 2s and no RateLimit fields holds every request to the
// host, not only the one retried.
func TestRetryTransportWaitsForRetryAfterThroughThePacer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := &throttler{n: 1, status: http.StatusServiceUnavailable, retry: "2"}
		rt := &RetryTransport{Base: pipeServer(t, srv), MaxAttempts: 1, Pacer: NewPacer(PacerOptions{})}
		hc := &http.Client{Transport: rt}
		resp, err := hc.Get("http://pipe/a")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("status %d, want the 503", resp.StatusCode)
		}
		resp, err = hc.Get("http://pipe/b")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		times, _ := srv.snapshot()
		if len(times) != 2 || times[1].Sub(times[0]) != 2*time.Second {
			t.Fatalf("requests at %v, want the second 2s after the first", times)
		}
	})
}

// hugeField returns a RateLimit item of the policy name used up for a
// minute, followed by distinct parameters up to about n bytes: a valid
// field that a parser keeping parameters unique spends time on in the
// square of its length.
func hugeField(name string, n int) string {
	var b strings.Builder
	b.WriteString(`"` + name + `";r=0;t=60`)
	for i := 0; b.Len() < n; i++ {
		b.WriteString(";k")
		b.WriteString(strconv.FormatInt(int64(i), 36))
	}
	return b.String()
}

// TestRetryTransportIgnoresHugeRateLimitFields: a server that answers
// with RateLimit and RateLimit-Policy fields of megabytes (a valid List
// whose item has half a million distinct parameters) costs the client
// no more than an ordinary answer: the fields are ignored as a whole,
// and the request after them is not held back. An ordinary field from
// the same server is still read.
func TestRetryTransportIgnoresHugeRateLimitFields(t *testing.T) {
	t.Parallel()
	huge := hugeField("api", 2<<20)
	var ordinary atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ordinary.Load() {
			w.Header().Set("RateLimit", `"api";r=0;t=60`)
		} else {
			w.Header().Set("RateLimit", huge)
			w.Header().Set("RateLimit-Policy", hugeField("api", 2<<20))
		}
		io.WriteString(w, "ok")
	}))
	defer ts.Close()
	rt := &RetryTransport{Pacer: NewPacer(PacerOptions{})}
	c := &http.Client{Transport: rt}
	get := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/items", nil)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- get() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("answer with huge fields: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("an answer with a 2 MiB RateLimit field still had the client busy after 30s")
	}
	if err := get(); err != nil {
		t.Fatalf("the request after huge fields: %v, want it sent (the fields ignored)", err)
	}
	ordinary.Store(true)
	if err := get(); err != nil {
		t.Fatal(err)
	}
	if err := get(); !errors.Is(err, ErrHeldBack) {
		t.Fatalf("after an ordinary r=0 for a minute: %v, want the request held back", err)
	}
}

// TestPacerRefillFreesRequestsHeldForAnswers: while a slow request is in
// flight, a request held because the last unit may be taken by it goes
// as soon as the reset and the policy's refill (q over w) give a unit
// more, without waiting for the slow answer.
func TestPacerRefillFreesRequestsHeldForAnswers(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		w.Header().Set("RateLimit-Policy", `"api";q=10;w=10`)
		w.Header().Set("RateLimit", `"api";r=1;t=1`)
		io.WriteString(w, "ok")
	}))
	defer ts.Close()
	defer free()
	rt := &RetryTransport{Pacer: NewPacer(PacerOptions{})}
	c := &http.Client{Transport: rt}
	get := func(ctx context.Context, path string) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+path, nil)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := get(ctx, "/items"); err != nil {
		t.Fatal(err)
	}
	slow := make(chan error, 1)
	go func() { slow <- get(ctx, "/slow") }()
	// Wait until the slow request is in flight.
	for deadline := time.Now().Add(20 * time.Second); ; {
		rt.Pacer.mu.Lock()
		n := len(rt.Pacer.keys[ts.Listener.Addr().String()].inflight)
		rt.Pacer.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow request never went")
		}
		time.Sleep(time.Millisecond)
	}
	ictx, icancel := context.WithTimeout(ctx, 20*time.Second)
	defer icancel()
	if err := get(ictx, "/items"); err != nil {
		t.Fatalf("a request after the reset, with the slow one in flight: %v, want it sent once the quota refilled", err)
	}
	select {
	case err := <-slow:
		t.Fatalf("the slow request ended first (%v): the test proves nothing", err)
	default:
	}
	free()
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
}

// TestPacerRetryAfterWinsOverALongerT: a 429 whose used-up policy says
// t=30 and whose Retry-After says 1 asks the client to come back in a
// second, as the draft gives Retry-After precedence: the transport's
// retry after that second is sent (not held back for 30s) and passes.
func TestPacerRetryAfterWinsOverALongerT(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("RateLimit", `"api";r=0;t=30`)
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("RateLimit", `"api";r=5;t=30`)
		io.WriteString(w, "ok")
	}))
	defer ts.Close()
	rt := &RetryTransport{Pacer: NewPacer(PacerOptions{})}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL, nil)
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatalf("%v, want the retry a second later to pass", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || n.Load() != 2 {
		t.Fatalf("status %d after %d requests, want 200 after 2", resp.StatusCode, n.Load())
	}
}

// TestPacerMaxHoldBoundsAWaitForAnswers: a server that gives no
// RateLimit-Policy says one unit is left, and the request that takes it
// stalls before its status line. A request without a deadline, held for
// that answer, is held no longer than the Pacer's MaxHold: it fails with
// a *HoldError, unsent, instead of hanging as long as the stalled one.
func TestPacerMaxHoldBoundsAWaitForAnswers(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	var items atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		} else {
			items.Add(1)
		}
		w.Header().Set("RateLimit", `"api";r=1;t=1`)
		io.WriteString(w, "ok")
	}))
	defer ts.Close()
	defer free()
	const maxHold = 300 * time.Millisecond
	rt := &RetryTransport{Pacer: NewPacer(PacerOptions{MaxHold: maxHold}), MaxAttempts: 1}
	c := &http.Client{Transport: rt}
	get := func(ctx context.Context, path string) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+path, nil)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	if err := get(context.Background(), "/items"); err != nil {
		t.Fatal(err)
	}
	slow := make(chan error, 1)
	go func() { slow <- get(context.Background(), "/slow") }()
	for deadline := time.Now().Add(20 * time.Second); ; {
		rt.Pacer.mu.Lock()
		n := len(rt.Pacer.keys[ts.Listener.Addr().String()].inflight)
		rt.Pacer.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow request never went")
		}
		time.Sleep(time.Millisecond)
	}
	held := make(chan error, 1)
	start := time.Now()
	go func() { held <- get(context.Background(), "/items") }()
	select {
	case err := <-held:
		if !errors.Is(err, ErrHeldBack) {
			t.Fatalf("the held request: %v, want a *HoldError", err)
		}
		if el := time.Since(start); el < maxHold {
			t.Errorf("failed after %s, before MaxHold (%s)", el, maxHold)
		}
	case <-time.After(maxHold + 3*time.Second):
		free()
		err := <-held
		t.Fatalf("a request without a deadline held for answers in flight was still held %s after MaxHold (%s); "+
			"it ended (%v) only once the stalled answer came", 3*time.Second, maxHold, err)
	}
	if n := items.Load(); n != 1 {
		t.Errorf("the server saw %d requests to /items, want 1: the held one is never sent", n)
	}
	free()
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
}

// TestRetryTransportEndsAHostWideHoldOneRequestAtATime: a server that
// refuses with a Retry-After and no RateLimit fields (as NGINX with a
// Retry-After, or an API's secondary limits) holds back the whole host.
// When the wait ends, one held request goes to find out, and the others
// wait for its answer instead of all going at once into the same refusal
// (a herd at every reset); once it is answered they go.
func TestRetryTransportEndsAHostWideHoldOneRequestAtATime(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	n := 0
	probe, answer := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(answer) }) }
	defer release()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		switch k {
		case 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		case 2:
			close(probe)
			select {
			case <-answer:
			case <-r.Context().Done():
			}
		}
	}))
	defer srv.Close()
	defer release() // before srv.Close: the held answer must not keep it waiting
	hc := &http.Client{Transport: &RetryTransport{MaxAttempts: 1, Pacer: NewPacer(PacerOptions{})}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	get := func() (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/items", nil)
		if err != nil {
			return 0, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get(); err != nil || code != http.StatusTooManyRequests {
		t.Fatalf("first request: %d %v, want the 429", code, err)
	}
	const held = 8
	codes := make(chan int, held)
	var wg sync.WaitGroup
	for range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, err := get()
			if err != nil {
				t.Errorf("held request: %v", err)
			}
			codes <- code
		}()
	}
	select {
	case <-probe:
	case <-ctx.Done():
		t.Fatal("no request reached the server after the Retry-After")
	}
	// Give the other held requests every chance to go while the first
	// one after the wait is unanswered: none may.
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	during := n - 1
	mu.Unlock()
	release()
	wg.Wait()
	close(codes)
	if during != 1 {
		t.Errorf("%d requests reached the server together when the Retry-After ended, want 1 until it was answered", during)
	}
	for code := range codes {
		if code != http.StatusOK {
			t.Errorf("a held request was answered %d, want 200 once the server accepts again", code)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n != held+1 {
		t.Errorf("the server saw %d requests, want %d", n, held+1)
	}
}

// TestPacerKeepsAHoldWhileNewHostsComeAndGo: a host that answered 429 with
// a Retry-After of 30s holds a request back; calls to more new hosts
// than the Pacer remembers (each answered 200, holding nothing) must not
// make it forget the hold and send the held request into the refusal:
// a key that holds requests back is forgotten last.
func TestPacerKeepsAHoldWhileNewHostsComeAndGo(t *testing.T) {
	t.Parallel()
	var victimHits atomic.Int64
	victim := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		victimHits.Add(1)
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer victim.Close()
	const maxKeys = 4
	var others []*httptest.Server
	for range 3 * maxKeys {
		s := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		defer s.Close()
		others = append(others, s)
	}
	p := NewPacer(PacerOptions{MaxKeys: maxKeys})
	hc := &http.Client{Transport: &RetryTransport{MaxAttempts: 1, Pacer: p}}
	get := func(ctx context.Context, url string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get(context.Background(), victim.URL); err != nil || code != http.StatusTooManyRequests {
		t.Fatalf("first request: %d %v, want the 429", code, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := make(chan error, 1)
	go func() {
		_, err := get(ctx, victim.URL)
		held <- err
	}()
	// Wait until the request is held, then call the other hosts.
	for p.Stats().Held == 0 {
		time.Sleep(time.Millisecond)
	}
	for _, s := range others {
		if code, err := get(context.Background(), s.URL); err != nil || code != http.StatusOK {
			t.Fatalf("request to another host: %d %v", code, err)
		}
	}
	select {
	case err := <-held:
		t.Fatalf("the held request ended (%v) while the Retry-After had 30s to go", err)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	if err := <-held; !errors.Is(err, ErrHeldBack) {
		t.Errorf("held request: %v, want ErrHeldBack once cancelled", err)
	}
	if n := victimHits.Load(); n != 1 {
		t.Errorf("the refusing host saw %d requests, want 1", n)
	}
	if n := p.Stats().Keys; n > maxKeys {
		t.Errorf("%d keys remembered, want at most %d", n, maxKeys)
	}
}

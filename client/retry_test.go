package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// throttler answers 429 with the given Retry-After to the first n
// requests, then 200; it records when each request arrived and the body
// it carried.
type throttler struct {
	mu     sync.Mutex
	n      int
	status int
	retry  string
	times  []time.Time
	bodies []string
}

func (s *throttler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.times = append(s.times, time.Now())
	s.bodies = append(s.bodies, string(b))
	k := len(s.times)
	s.mu.Unlock()
	if k <= s.n {
		if s.retry != "" {
			w.Header().Set("Retry-After", s.retry)
		}
		w.WriteHeader(s.status)
		io.WriteString(w, `{"message":"Too Many Requests"}`)
		return
	}
	io.WriteString(w, "ok")
}

func (s *throttler) snapshot() ([]time.Time, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.times...), append([]string(nil), s.bodies...)
}

// closeCounter counts how many response bodies the transport closed.
type closeCounter struct {
	base   http.RoundTripper
	closed atomic.Int64
}

type countingBody struct {
	io.ReadCloser
	c *closeCounter
}

func (b countingBody) Close() error { b.c.closed.Add(1); return b.ReadCloser.Close() }

func (c *closeCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if resp != nil {
		resp.Body = countingBody{resp.Body, c}
	}
	return resp, err
}

// TestRetryTransportHonoursRetryAfterSpacing runs in a synctest bubble
// over in-memory pipes (a real http.Server and http.Transport), so the
// one-second Retry-After takes no real time and every gap is exact.
func TestRetryTransportHonoursRetryAfterSpacing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const baseDelay = 20 * time.Millisecond
		srv := &throttler{n: 2, status: http.StatusTooManyRequests, retry: "1"}
		cc := &closeCounter{base: pipeServer(t, srv)}
		var waits []time.Duration
		rt := &RetryTransport{Base: cc, BaseDelay: baseDelay,
			OnRetry: func(_ int, _ *http.Response, w time.Duration) { waits = append(waits, w) }}
		c := &http.Client{Transport: rt}

		req, _ := http.NewRequest(http.MethodPost, "http://pipe/", strings.NewReader("payload"))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("got %d %q, want 200 ok", resp.StatusCode, body)
		}
		times, bodies := srv.snapshot()
		if len(times) != 3 || len(waits) != 2 {
			t.Fatalf("server saw %d requests after %d waits, want 3 and 2", len(times), len(waits))
		}
		for i, b := range bodies {
			if b != "payload" {
				t.Errorf("attempt %d carried body %q, want the replayed payload", i+1, b)
			}
		}
		// Retry-After: 1 means a wait of a second plus a jitter below a
		// tenth of it (BaseDelay being less), and the retry comes exactly
		// that wait after the 429.
		for i, w := range waits {
			if w < time.Second || w >= time.Second+time.Second/10 {
				t.Errorf("wait %d = %s, want in [1s, 1.1s)", i+1, w)
			}
			if gap := times[i+1].Sub(times[i]); gap != w {
				t.Errorf("retry %d came %s after the 429, want the chosen wait %s", i+1, gap, w)
			}
		}
		if got := cc.closed.Load(); got != 3 {
			t.Errorf("%d bodies closed, want 3 (two discarded 429s and the final answer)", got)
		}
	})
}

// TestRetryTransportSpreadsALongRetryAfter: clients refused together
// with a long Retry-After come back spread over a tenth of it, not all
// within BaseDelay of the same instant: refused at one window's end, 50
// clients told to come back in 30 s came back within 100 ms of each
// other, into the next window's first moments, where most of them were
// refused again.
func TestRetryTransportSpreadsALongRetryAfter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		seen := map[string]bool{}
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			again := seen[r.URL.Path]
			seen[r.URL.Path] = true
			mu.Unlock()
			if !again {
				w.Header().Set("Retry-After", "30")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			io.WriteString(w, "ok")
		})
		base := pipeServer(t, h)
		var wmu sync.Mutex
		var waits []time.Duration
		rt := &RetryTransport{Base: base, MaxAttempts: 2, OnRetry: func(_ int, _ *http.Response, w time.Duration) {
			wmu.Lock()
			waits = append(waits, w)
			wmu.Unlock()
		}}
		c := &http.Client{Transport: rt}
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Go(func() {
				resp, err := c.Get(fmt.Sprintf("http://pipe/%d", i))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			})
		}
		wg.Wait()
		if len(waits) != 50 {
			t.Fatalf("%d waits, want 50", len(waits))
		}
		lo, hi := waits[0], waits[0]
		for _, w := range waits {
			if w < 30*time.Second || w >= 33*time.Second {
				t.Errorf("wait %s, want in [30s, 33s): Retry-After and up to a tenth of it", w)
			}
			lo, hi = min(lo, w), max(hi, w)
		}
		if hi-lo < time.Second {
			t.Errorf("50 clients told Retry-After: 30 come back within %s of each other, want spread over up to 3 s", hi-lo)
		}
	})
}

func TestRetryTransportBackoffWithoutRetryAfter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := &throttler{n: 10, status: http.StatusServiceUnavailable}
		var waits []time.Duration
		rt := &RetryTransport{
			Base:        pipeServer(t, srv),
			MaxAttempts: 4,
			BaseDelay:   40 * time.Millisecond,
			MaxDelay:    100 * time.Millisecond,
			OnRetry:     func(_ int, _ *http.Response, w time.Duration) { waits = append(waits, w) },
		}
		resp, err := (&http.Client{Transport: rt}).Get("http://pipe/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("status %d, want the last 503 after giving up", resp.StatusCode)
		}
		times, _ := srv.snapshot()
		if len(times) != 4 {
			t.Fatalf("server saw %d attempts, want MaxAttempts = 4", len(times))
		}
		// Full jitter: the k-th wait lies in (0, min(MaxDelay, BaseDelay·2^k)].
		caps := []time.Duration{40 * time.Millisecond, 80 * time.Millisecond, 100 * time.Millisecond}
		if len(waits) != 3 {
			t.Fatalf("%d waits, want 3", len(waits))
		}
		for i, w := range waits {
			if w <= 0 || w > caps[i] {
				t.Errorf("wait %d = %s, want in (0, %s]", i, w, caps[i])
			}
			if gap := times[i+1].Sub(times[i]); gap != w {
				t.Errorf("attempt %d came %s after the previous, want the chosen wait %s", i+2, gap, w)
			}
		}
	})
}

// oneShotBody is a request body that cannot be produced again.
type oneShotBody struct{ io.Reader }

func (oneShotBody) Close() error { return nil }

// TestRetryTransportNeverRetriesUnreplayableBody and
// TestRetryTransportGivesUpOnLongRetryAfter run over real loopback
// sockets: neither waits.
func TestRetryTransportNeverRetriesUnreplayableBody(t *testing.T) {
	t.Parallel()
	srv := &throttler{n: 5, status: http.StatusTooManyRequests, retry: "0"}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	rt := &RetryTransport{BaseDelay: time.Millisecond}
	req, _ := http.NewRequest(http.MethodPost, ts.URL, oneShotBody{bytes.NewBufferString("once")})
	if req.GetBody != nil {
		t.Fatal("test setup: body must not be replayable")
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want the 429 handed back", resp.StatusCode)
	}
	if b, _ := io.ReadAll(resp.Body); !strings.Contains(string(b), "Too Many Requests") {
		t.Errorf("the 429's body was not left to the caller: %q", b)
	}
	if times, _ := srv.snapshot(); len(times) != 1 {
		t.Fatalf("server saw %d requests, want exactly 1", len(times))
	}
}

func TestRetryTransportGivesUpOnLongRetryAfter(t *testing.T) {
	t.Parallel()
	srv := &throttler{n: 5, status: http.StatusTooManyRequests, retry: "3600"}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	rt := &RetryTransport{MaxRetryAfter: time.Minute}
	resp, err := (&http.Client{Transport: rt}).Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if times, _ := srv.snapshot(); len(times) != 1 || resp.StatusCode != 429 {
		t.Fatalf("saw %d requests and status %d, want 1 and 429", len(times), resp.StatusCode)
	}
}

// TestRetryTransportHonoursContext: a context cancelled while the
// transport waits for a Retry-After ends the wait at once with the
// context's error, and a Retry-After that ends after the request's
// deadline is not waited for at all: the caller gets the 429 at once, as
// Wait and RetryInterceptor give up at once.
func TestRetryTransportHonoursContext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := &throttler{n: 5, status: http.StatusTooManyRequests, retry: "30"}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rt := &RetryTransport{Base: pipeServer(t, srv), OnRetry: func(int, *http.Response, time.Duration) {
			time.AfterFunc(200*time.Millisecond, cancel)
		}}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://pipe/", nil)
		start := time.Now()
		_, err := (&http.Client{Transport: rt}).Do(req)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want the context's cancellation", err)
		}
		if el := time.Since(start); el != 200*time.Millisecond {
			t.Fatalf("returned after %s, want the cancellation's 200ms (not the 30s Retry-After)", el)
		}
		if times, _ := srv.snapshot(); len(times) != 1 {
			t.Fatalf("server saw %d requests, want 1", len(times))
		}
	})
	synctest.Test(t, func(t *testing.T) {
		srv := &throttler{n: 5, status: http.StatusTooManyRequests, retry: "30"}
		rt := &RetryTransport{Base: pipeServer(t, srv)}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://pipe/", nil)
		start := time.Now()
		resp, err := (&http.Client{Transport: rt}).Do(req)
		if err != nil {
			t.Fatalf("err = %v, want the 429 handed back at once", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "Too Many Requests") {
			t.Fatalf("got %d %q, want the server's 429 and its body", resp.StatusCode, body)
		}
		if el := time.Since(start); el != 0 {
			t.Fatalf("returned after %s, want at once: the 30s Retry-After ends after the 10s deadline", el)
		}
		if times, _ := srv.snapshot(); len(times) != 1 {
			t.Fatalf("server saw %d requests, want 1", len(times))
		}
	})
}

// TestRetryTransportGivesUpOnHugeRetryAfter: a Retry-After too long for
// a time.Duration (delay-seconds of 11 and 20 digits, a date in the year
// 9999) asks for a very long wait, not for none: the transport hands the
// 429 back after one request, whether MaxRetryAfter is the default or
// the longest Duration, and its Pacer holds the next request back unsent.
func TestRetryTransportGivesUpOnHugeRetryAfter(t *testing.T) {
	t.Parallel()
	for _, retry := range []string{"99999999999", "99999999999999999999", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		for _, maxRA := range []time.Duration{0, maxDuration} {
			srv := &throttler{n: 100, status: http.StatusTooManyRequests, retry: retry}
			ts := httptest.NewServer(srv)
			p := NewPacer(PacerOptions{})
			rt := &RetryTransport{MaxRetryAfter: maxRA, BaseDelay: time.Millisecond, Pacer: p}
			c := &http.Client{Transport: rt}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL, nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Errorf("Retry-After %q, MaxRetryAfter %s: %v, want the 429", retry, maxRA, err)
			} else {
				resp.Body.Close()
				if resp.StatusCode != http.StatusTooManyRequests {
					t.Errorf("Retry-After %q, MaxRetryAfter %s: status %d, want 429", retry, maxRA, resp.StatusCode)
				}
			}
			if times, _ := srv.snapshot(); len(times) != 1 {
				t.Errorf("Retry-After %q, MaxRetryAfter %s: server saw %d requests, want 1", retry, maxRA, len(times))
			}
			req, _ = http.NewRequestWithContext(ctx, http.MethodGet, ts.URL, nil)
			resp, err = c.Do(req)
			if he := (*HoldError)(nil); !errors.As(err, &he) {
				t.Errorf("Retry-After %q, MaxRetryAfter %s: next request got %v, want a *HoldError", retry, maxRA, err)
			}
			if resp != nil {
				resp.Body.Close()
			}
			if times, _ := srv.snapshot(); len(times) != 1 {
				t.Errorf("Retry-After %q, MaxRetryAfter %s: the held request reached the server", retry, maxRA)
			}
			cancel()
			ts.Close()
		}
	}
}

// trackedBody is a request body that records its Close.
type trackedBody struct {
	io.Reader
	closed chan struct{}
	once   sync.Once
}

func newTrackedBody(s string) *trackedBody {
	return &trackedBody{Reader: strings.NewReader(s), closed: make(chan struct{})}
}

func (b *trackedBody) Close() error { b.once.Do(func() { close(b.closed) }); return nil }

// TestRetryTransportClosesBodiesItDoesNotSend: a RoundTripper must close
// the request's body whatever happens. A request body the transport does
// not send (the Pacer holds it back, the throttle rejects it, the context
// ends while it waits to retry, the budget refuses the retry) is closed,
// so a caller streaming it through a pipe is not left blocked for ever.
func TestRetryTransportClosesBodiesItDoesNotSend(t *testing.T) {
	t.Parallel()
	// closedWithin reports whether done is closed within a generous bound.
	closedWithin := func(done <-chan struct{}) bool {
		select {
		case <-done:
			return true
		case <-time.After(20 * time.Second):
			return false
		}
	}
	// pipeBody returns a request body fed by a writer goroutine, and a
	// channel closed when that goroutine ends: when the body was read to
	// its end or closed.
	pipeBody := func(t *testing.T) (io.ReadCloser, <-chan struct{}) {
		pr, pw := io.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 16 {
				if _, err := pw.Write([]byte("chunk of an upload ")); err != nil {
					return
				}
			}
			pw.Close()
		}()
		t.Cleanup(func() { pr.Close(); <-done })
		return pr, done
	}

	t.Run("held by the pacer", func(t *testing.T) {
		t.Parallel()
		srv := &throttler{n: 100, status: http.StatusTooManyRequests, retry: "30"}
		ts := httptest.NewServer(srv)
		defer ts.Close()
		rt := &RetryTransport{MaxRetryAfter: time.Second, Pacer: NewPacer(PacerOptions{})}
		c := &http.Client{Transport: rt}
		resp, err := c.Get(ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		body, done := pipeBody(t)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL, body)
		if _, err := c.Do(req); !errors.Is(err, ErrHeldBack) {
			t.Fatalf("err = %v, want the request held back", err)
		}
		if !closedWithin(done) {
			t.Fatal("the body of a request the pacer held back was never closed: its writer is blocked")
		}
	})
	t.Run("throttled", func(t *testing.T) {
		t.Parallel()
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		defer ts.Close()
		th := NewAdaptiveThrottle(AdaptiveThrottleOptions{K: 1})
		now := time.Now()
		for range 10000 {
			th.Refused(now) // requests that were all refused
		}
		rt := &RetryTransport{MaxAttempts: 1, Throttle: th}
		for i := 0; ; i++ {
			body, done := pipeBody(t)
			req, _ := http.NewRequest(http.MethodPost, ts.URL, body)
			resp, err := (&http.Client{Transport: rt}).Do(req)
			if resp != nil {
				resp.Body.Close()
			}
			if errors.Is(err, ErrThrottled) {
				if !closedWithin(done) {
					t.Fatal("the body of a request rejected by the throttle was never closed: its writer is blocked")
				}
				return
			}
			if i == 100 {
				t.Fatalf("100 requests and none throttled (last: %v)", err)
			}
		}
	})
	t.Run("context ends while waiting", func(t *testing.T) {
		t.Parallel()
		srv := &throttler{n: 100, status: http.StatusTooManyRequests, retry: "30"}
		ts := httptest.NewServer(srv)
		defer ts.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rt := &RetryTransport{OnRetry: func(int, *http.Response, time.Duration) { cancel() }}
		var bodies []*trackedBody
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL, newTrackedBody("payload"))
		req.GetBody = func() (io.ReadCloser, error) {
			b := newTrackedBody("payload")
			bodies = append(bodies, b)
			return b, nil
		}
		if _, err := (&http.Client{Transport: rt}).Do(req); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want the context's cancellation", err)
		}
		if len(bodies) != 1 {
			t.Fatalf("GetBody called %d times, want 1", len(bodies))
		}
		if !closedWithin(bodies[0].closed) {
			t.Fatal("the body made for a retry that never went was never closed")
		}
	})
	t.Run("budget refuses the retry", func(t *testing.T) {
		t.Parallel()
		srv := &throttler{n: 100, status: http.StatusTooManyRequests, retry: "0"}
		ts := httptest.NewServer(srv)
		defer ts.Close()
		rt := &RetryTransport{Budget: NewRetryBudget(RetryBudgetOptions{Ratio: -1, MinRetries: -1})}
		var bodies []*trackedBody
		req, _ := http.NewRequest(http.MethodPost, ts.URL, newTrackedBody("payload"))
		req.GetBody = func() (io.ReadCloser, error) {
			b := newTrackedBody("payload")
			bodies = append(bodies, b)
			return b, nil
		}
		resp, err := (&http.Client{Transport: rt}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("status %d, want the 429 handed back", resp.StatusCode)
		}
		if len(bodies) != 1 {
			t.Fatalf("GetBody called %d times, want 1", len(bodies))
		}
		if !closedWithin(bodies[0].closed) {
			t.Fatal("the body made for a retry the budget refused was never closed")
		}
	})
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 8, 49, 30, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"17", 17 * time.Second, true},
		{" 5 ", 5 * time.Second, true},
		{"Mon, 30 Nov 2026 08:49:37 GMT", 7 * time.Second, true},   // IMF-fixdate
		{"Monday, 30-Nov-26 08:49:40 GMT", 10 * time.Second, true}, // RFC 850
		{"Mon Nov 30 08:49:31 2026", time.Second, true},            // asctime
		{"Mon, 30 Nov 2026 08:00:00 GMT", 0, true},                 // in the past
		{"", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{"9223372036", 9223372036 * time.Second, true},
		{"99999999999", maxDuration, true},          // too long for a Duration: the longest
		{"99999999999999999999", maxDuration, true}, // past int64 too
		{"Fri, 31 Dec 9999 23:59:59 GMT", maxDuration, true},
	}
	for _, c := range cases {
		got, ok := ParseRetryAfter(c.in, now)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseRetryAfter(%q) = %s, %v; want %s, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", "Sun, 06 Nov 1994 08:49:37 GMT", "x", "1e9"} {
		f.Add(s)
	}
	now := time.Unix(1_800_000_000, 0)
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := ParseRetryAfter(s, now)
		if d < 0 || (!ok && d != 0) {
			t.Fatalf("ParseRetryAfter(%q) = %s, %v", s, d, ok)
		}
	})
}

// TestRetryTransportStalledRefusalBody: a server whose 429 head comes
// with a body that stalls (Content-Length 100, ten bytes sent) does not
// hold the retry past its Retry-After: the body is drained while the
// transport waits and cut when the wait ends, so a request without a
// deadline still gets the next attempt's answer.
func TestRetryTransportStalledRefusalBody(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	stalled := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, "0123456789")
			w.(http.Flusher).Flush()
			select {
			case <-stalled:
			case <-r.Context().Done():
			}
			return
		}
		io.WriteString(w, "ok")
	}))
	defer ts.Close()
	defer close(stalled)
	rt := &RetryTransport{BaseDelay: time.Millisecond}
	done := make(chan error, 1)
	go func() {
		resp, err := (&http.Client{Transport: rt}).Get(ts.URL)
		if err == nil {
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d, want 200", resp.StatusCode)
			}
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		ts.CloseClientConnections()
		<-done
		t.Fatal("a 429 whose body stalls held the retry for 20s; its Retry-After was 0")
	}
	if got := n.Load(); got != 2 {
		t.Fatalf("server saw %d requests, want 2", got)
	}
}

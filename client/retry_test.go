package client

import (
	"bytes"
	"context"
	"errors"
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
		// Retry-After: 1 means a wait of a second plus a jitter below
		// BaseDelay, and the retry comes exactly that wait after the 429.
		for i, w := range waits {
			if w < time.Second || w >= time.Second+baseDelay {
				t.Errorf("wait %d = %s, want in [1s, 1s+%s)", i+1, w, baseDelay)
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

func TestRetryTransportHonoursContext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		srv := &throttler{n: 5, status: http.StatusTooManyRequests, retry: "30"}
		rt := &RetryTransport{Base: pipeServer(t, srv)}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://pipe/", nil)
		start := time.Now()
		_, err := (&http.Client{Transport: rt}).Do(req)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the context's deadline", err)
		}
		if el := time.Since(start); el != 200*time.Millisecond {
			t.Fatalf("returned after %s, want the context's 200ms (not the 30s Retry-After)", el)
		}
		if times, _ := srv.snapshot(); len(times) != 1 {
			t.Fatalf("server saw %d requests, want 1", len(times))
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
		{"99999999999999999999", 0, false},
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

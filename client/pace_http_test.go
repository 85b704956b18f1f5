package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
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

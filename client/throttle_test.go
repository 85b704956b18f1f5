package client

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestRejectProbability(t *testing.T) {
	t.Parallel()
	cases := []struct {
		req, acc int64
		k        float64
		want     float64
	}{
		{0, 0, 2, 0},
		{10, 10, 2, 0},
		{10, 5, 2, 0},
		{10, 0, 2, 10.0 / 11},
		{100, 10, 2, 80.0 / 101},
		{100, 10, 1.1, 89.0 / 101},
	}
	for _, c := range cases {
		if got := rejectProbability(c.req, c.acc, c.k); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("rejectProbability(%d, %d, %g) = %g, want %g", c.req, c.acc, c.k, got, c.want)
		}
	}
}

func TestAdaptiveThrottleOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		k, want float64
	}{{0, 2}, {3, 3}, {0.5, 1}, {-1, 1}, {math.NaN(), 1}} {
		if got := NewAdaptiveThrottle(AdaptiveThrottleOptions{K: c.k}).k; got != c.want {
			t.Errorf("K %g: %g, want %g", c.k, got, c.want)
		}
	}
}

// TestAdaptiveThrottleProperties drives throttles with random traffic:
// the probability stays in [0, 1), a backend that accepts everything is
// never throttled, and counts older than the window are forgotten.
func TestAdaptiveThrottleProperties(t *testing.T) {
	t.Parallel()
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 3))
		k := 1 + rng.Float64()*3
		window := time.Duration(1+rng.IntN(300)) * time.Second
		all := NewAdaptiveThrottle(AdaptiveThrottleOptions{K: k, Window: window})
		some := NewAdaptiveThrottle(AdaptiveThrottleOptions{K: k, Window: window})
		now, newest := t0, t0
		for range 3000 {
			now = now.Add(time.Duration(rng.Int64N(int64(window / 50))))
			if rng.IntN(100) == 0 {
				now = now.Add(-time.Duration(rng.Int64N(int64(time.Minute)))) // a clock step back
			}
			if now.After(newest) {
				newest = now
			}
			if !all.allow(now, rng.Float64()) {
				t.Fatalf("seed %d: a throttle whose backend accepted everything rejected at %s", seed, now.Sub(t0))
			}
			all.Accepted(now)
			if p := some.RejectProbability(now); p < 0 || p >= 1 {
				t.Fatalf("seed %d: probability %g", seed, p)
			}
			if some.allow(now, rng.Float64()) {
				if rng.IntN(10) == 0 {
					some.Accepted(now)
				} else {
					some.Refused(now)
				}
			}
		}
		if p := some.RejectProbability(now); p < 0.5 {
			t.Errorf("seed %d: accepting a tenth gives a probability of %g, want above 0.5", seed, p)
		}
		// A whole window after the newest instant seen (and a bucket
		// more), nothing counts.
		later := newest.Add(window + window/60 + time.Nanosecond)
		if p := some.RejectProbability(later); p != 0 {
			t.Errorf("seed %d: %s after the last request the probability is %g, want 0", seed, later.Sub(newest), p)
		}
	}
}

// capacity is a backend that accepts at most perSecond requests in each
// second and refuses the rest.
type capacity struct {
	perSecond int
	second    int64
	n         int
}

func (c *capacity) take(now time.Time) bool {
	if s := now.Unix(); s != c.second {
		c.second, c.n = s, 0
	}
	if c.n < c.perSecond {
		c.n++
		return true
	}
	return false
}

// TestAdaptiveThrottleHoldsTheBackendToKTimesItsAccepts: a client offering
// ten times what the backend accepts (so that without throttling the
// backend refuses 90%) sends it, once the window has filled, at most
// about K times what it accepts, and the backend still accepts nearly all
// it can.
func TestAdaptiveThrottleHoldsTheBackendToKTimesItsAccepts(t *testing.T) {
	t.Parallel()
	for _, k := range []float64{1.1, 1.5, 2, 3} {
		rng := rand.New(rand.NewPCG(uint64(k*10), 1))
		th := NewAdaptiveThrottle(AdaptiveThrottleOptions{K: k})
		backend := &capacity{perSecond: 10}
		var seen, accepted int
		start := t0
		for i := range 100 * 600 { // 100 a second for 10 minutes
			now := start.Add(time.Duration(i) * 10 * time.Millisecond)
			if !th.allow(now, rng.Float64()) {
				continue
			}
			ok := backend.take(now)
			if ok {
				th.Accepted(now)
			} else {
				th.Refused(now)
			}
			if now.Sub(start) >= 4*time.Minute { // two windows to settle
				seen++
				if ok {
					accepted++
				}
			}
		}
		ratio := float64(seen) / float64(accepted)
		if ratio > k*1.05+0.02 {
			t.Errorf("K %g: the backend saw %d requests for %d accepted (%.2f×), want at most about K×", k, seen, accepted, ratio)
		}
		t.Logf("K %g: the backend saw %d, accepted %d (%.2f×)", k, seen, accepted, ratio)
		if accepted < 3*3600/4 {
			t.Errorf("K %g: the backend accepted %d in 6 minutes, want at least three quarters of the 3600 it can", k, accepted)
		}
		if th.Rejected() == 0 {
			t.Errorf("K %g: nothing rejected locally", k)
		}
	}
}

// TestRetryTransportAdaptiveThrottle is the acceptance measurement over a
// real net/http server (on in-memory pipes, in a synctest bubble, so the
// virtual minutes take a few seconds): a backend that accepts 5 requests
// a second, offered 50 a second, once through a transport with an
// AdaptiveThrottle (K = 2, a window of 30s) and once without; counted
// after three windows.
func TestRetryTransportAdaptiveThrottle(t *testing.T) {
	t.Parallel()
	for _, throttled := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			backend := &capacity{perSecond: 5}
			var seen, accepted int
			start := time.Now()
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				ok := backend.take(time.Now())
				if time.Since(start) >= 90*time.Second {
					seen++
					if ok {
						accepted++
					}
				}
				mu.Unlock()
				if !ok {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.WriteHeader(http.StatusOK)
			})
			rt := &RetryTransport{Base: pipeServer(t, h), MaxAttempts: 1}
			var th *AdaptiveThrottle
			if throttled {
				th = NewAdaptiveThrottle(AdaptiveThrottleOptions{K: 2, Window: 30 * time.Second})
				rt.Throttle = th
			}
			hc := &http.Client{Transport: rt}
			for range 50 * 150 { // 50 a second for 2.5 minutes
				time.Sleep(20 * time.Millisecond)
				resp, err := hc.Get("http://pipe/")
				if err == nil {
					resp.Body.Close()
				}
			}
			ratio := float64(seen) / float64(accepted)
			t.Logf("throttled %v: in the last minute the backend saw %d requests and accepted %d (%.2f×); %s rejected locally",
				throttled, seen, accepted, ratio, rejected(th))
			// A minute of random rejections: measured between 1.85× and
			// 2.16× over 12 runs.
			if throttled && ratio > 2.5 {
				t.Errorf("the backend saw %.2f× what it accepted, want at most about K = 2", ratio)
			}
			if !throttled && ratio < 9 {
				t.Errorf("without throttling the backend saw %.2f× what it accepted, want about 10 (the test's load)", ratio)
			}
		})
	}
}

func rejected(th *AdaptiveThrottle) string {
	if th == nil {
		return "none"
	}
	return fmt.Sprint(th.Rejected())
}

// TestAdaptiveThrottleLetsAFirstBurstThrough: a backend that has refused
// nothing is never throttled. Sixteen requests sent at once through a
// fresh throttle, or after a quiet spell longer than its window, all
// reach a healthy backend (a real net/http server on loopback that
// answers none of them until all came or failed): requests still in
// flight count neither for nor against it.
func TestAdaptiveThrottleLetsAFirstBurstThrough(t *testing.T) {
	t.Parallel()
	const burst = 16
	var mu sync.Mutex
	arrived := 0
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived++
		mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer ts.Close()
	th := NewAdaptiveThrottle(AdaptiveThrottleOptions{K: 2, Window: time.Minute})
	hc := &http.Client{Transport: &RetryTransport{Throttle: th, MaxAttempts: 1}}
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range burst {
		wg.Go(func() {
			resp, err := hc.Get(ts.URL)
			if err != nil {
				failed.Add(1)
				return
			}
			resp.Body.Close()
		})
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := arrived
		mu.Unlock()
		if n+int(failed.Load()) == burst {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after 20s %d requests arrived and %d failed, want %d in all", n, failed.Load(), burst)
			break
		}
	}
	close(release)
	wg.Wait()
	if n := failed.Load(); n != 0 || th.Rejected() != 0 {
		t.Fatalf("%d of %d requests to a backend that refused nothing failed (%d rejected locally), want none",
			n, burst, th.Rejected())
	}
	// The same after a quiet spell longer than the window, clock passed in.
	now := time.Now().Add(2 * time.Minute)
	for i := range burst {
		if !th.Allow(now) {
			t.Fatalf("request %d of a burst after a quiet spell rejected, with nothing refused", i+1)
		}
	}
}

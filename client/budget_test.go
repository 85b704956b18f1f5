package client

import (
	"context"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestRetryBudgetOptions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in        RetryBudgetOptions
		ratio     float64
		min       int64
		bucketLen time.Duration
	}{
		{RetryBudgetOptions{}, 0.1, 10, 500 * time.Millisecond},
		{RetryBudgetOptions{Ratio: 0.5, MinRetries: 3, Window: time.Minute}, 0.5, 3, 3 * time.Second},
		{RetryBudgetOptions{Ratio: -1, MinRetries: -1}, 0, 0, 500 * time.Millisecond},
		{RetryBudgetOptions{Ratio: math.NaN()}, 0, 10, 500 * time.Millisecond},
	}
	for _, c := range cases {
		b := NewRetryBudget(c.in)
		if b.ratio != c.ratio || b.min != c.min || b.c.width != c.bucketLen {
			t.Errorf("%+v: ratio %g, min %d, bucket %s; want %g, %d, %s", c.in, b.ratio, b.min, b.c.width, c.ratio, c.min, c.bucketLen)
		}
	}
}

// TestRetryBudgetBoundsEveryWindow drives budgets with random requests
// and retries: a retry is allowed exactly when, with it, the retries of
// the window (its 20 buckets up to the retry's) stay within Ratio ×
// requests + MinRetries; so every window that ends with a retry keeps
// the bound.
func TestRetryBudgetBoundsEveryWindow(t *testing.T) {
	t.Parallel()
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 5))
		opts := RetryBudgetOptions{
			Ratio:      rng.Float64() * 0.5,
			MinRetries: rng.IntN(5) - 1,
			Window:     time.Duration(1+rng.IntN(30)) * time.Second,
		}
		b := NewRetryBudget(opts)
		width := b.c.width
		type counts struct{ req, ret int64 }
		perBucket := map[int64]*counts{}
		at := func(i int64) *counts {
			if perBucket[i] == nil {
				perBucket[i] = &counts{}
			}
			return perBucket[i]
		}
		b.Request(t0) // the window's buckets count from here
		at(0).req++
		now := t0
		var last int64
		for range 5000 {
			now = now.Add(time.Duration(rng.Int64N(int64(width))))
			i := int64(now.Sub(t0) / width)
			last = i
			if rng.IntN(3) > 0 {
				b.Request(now)
				at(i).req++
				continue
			}
			// What the window ending in bucket i holds before this retry.
			var req, ret int64
			for j := i - 19; j <= i; j++ {
				if c := perBucket[j]; c != nil {
					req, ret = req+c.req, ret+c.ret
				}
			}
			fits := float64(ret+1) <= b.ratio*float64(req)+float64(b.min)
			if got := b.Retry(now); got != fits {
				t.Fatalf("seed %d: Retry at bucket %d = %v with %d requests and %d retries in the window, want %v",
					seed, i, got, req, ret, fits)
			}
			if fits {
				at(i).ret++
			}
		}
		// Every window that ends with an allowed retry keeps the bound.
		for end := int64(0); end <= last; end++ {
			if c := perBucket[end]; c == nil || c.ret == 0 {
				continue
			}
			var req, ret int64
			for j := end - 19; j <= end; j++ {
				if c := perBucket[j]; c != nil {
					req, ret = req+c.req, ret+c.ret
				}
			}
			if float64(ret) > b.ratio*float64(req)+float64(b.min)+1e-9 {
				t.Fatalf("seed %d: %d retries for %d requests in the window ending at bucket %d (ratio %g, min %d)",
					seed, ret, req, end, b.ratio, b.min)
			}
		}
	}
}

// TestRetryTransportRetryBudget: against a backend that always answers
// 503 with Retry-After: 0, 200 requests with up to 4 attempts each send
// the backend 800 attempts without a budget; with a budget of 10% and a
// minimum of 5 they send at most 200 + 20 + 5.
func TestRetryTransportRetryBudget(t *testing.T) {
	t.Parallel()
	for _, withBudget := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			var seen atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen.Add(1)
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusServiceUnavailable)
			})
			rt := &RetryTransport{Base: pipeServer(t, h), MaxAttempts: 4, BaseDelay: time.Millisecond}
			var b *RetryBudget
			if withBudget {
				b = NewRetryBudget(RetryBudgetOptions{Ratio: 0.1, MinRetries: 5})
				rt.Budget = b
			}
			hc := &http.Client{Transport: rt}
			for range 200 {
				resp, err := hc.Get("http://pipe/")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusServiceUnavailable {
					t.Fatalf("status %d, want the last 503", resp.StatusCode)
				}
			}
			t.Logf("budget %v: the backend saw %d attempts for 200 requests (%s retries denied)", withBudget, seen.Load(), denied(b))
			switch n := seen.Load(); {
			case withBudget && n > 225:
				t.Errorf("with a budget the backend saw %d attempts, want at most 225", n)
			case withBudget && b.Denied() == 0:
				t.Errorf("with a budget no retry was denied")
			case !withBudget && n != 800:
				t.Errorf("without a budget the backend saw %d attempts, want 800", n)
			}
		})
	}
}

func denied(b *RetryBudget) string {
	if b == nil {
		return "no"
	}
	return strconv.FormatInt(b.Denied(), 10)
}

// TestRetryBudgetNotSpentByCallersWhoLeft: a budget of two retries; two
// callers are told to retry in 5 s and leave while they wait. Their
// retries were never sent, so a third caller, told to retry at once, is
// still allowed its retry, and gets the backend's 200.
func TestRetryBudgetNotSpentByCallersWhoLeft(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var seen atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch seen.Add(1) {
			case 1, 2:
				w.Header().Set("Retry-After", "5")
				w.WriteHeader(http.StatusServiceUnavailable)
			case 3:
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusServiceUnavailable)
			default:
				w.WriteHeader(http.StatusOK)
			}
		})
		b := NewRetryBudget(RetryBudgetOptions{Ratio: -1, MinRetries: 2})
		hc := &http.Client{Transport: &RetryTransport{Base: pipeServer(t, h), MaxAttempts: 2, Budget: b}}
		for range 2 {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(100*time.Millisecond, cancel)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://pipe/", nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp, err := hc.Do(req); err == nil {
				resp.Body.Close()
				t.Fatalf("a caller who left got %d", resp.StatusCode)
			}
		}
		resp, err := hc.Get("http://pipe/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || b.Denied() != 0 {
			t.Fatalf("the third caller got %d with %d retries denied; want its retry's 200, none denied", resp.StatusCode, b.Denied())
		}
	})
}

package client_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"net/http/httptest"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/client"
	"github.com/floodgate/floodgate/httpapi"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestWaitHoldsForALeakyQueuesDelay: a leaky queue allows a request with a
// delay (hold the action this long). Callers of client.Wait that arrive
// together must come out spaced at the queue's rate, as the gateway holds
// its requests, not all at once.
func TestWaitHoldsForALeakyQueuesDelay(t *testing.T) {
	t.Parallel()
	const callers = 5
	interval := 200 * time.Millisecond // 5 a second
	r := ruletest.With(t, floodgate.Limit{Name: "shaped", Algorithm: floodgate.LeakyQueue, Rate: 5, Per: time.Second, Burst: callers},
		limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	ts := httptest.NewServer(httpapi.New(memEngine(t), httpapi.Rules(r), httpapi.Options{}))
	defer ts.Close()
	c := client.NewHTTP(ts.URL, client.HTTPOptions{Timeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	start := time.Now()
	var mu sync.Mutex
	var out []time.Duration
	var delays []time.Duration
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			d, err := c.Wait(ctx, client.WaitOptions{}, client.Hit{Limit: "shaped", Key: "k"})
			if err != nil || !d.Allowed {
				t.Errorf("Wait = %+v, %v", d, err)
				return
			}
			mu.Lock()
			out = append(out, time.Since(start))
			delays = append(delays, d.Delay)
			mu.Unlock()
		})
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
	// The i-th caller let through may go no earlier than i intervals after
	// the first check (a few milliseconds are left for the rounding of the
	// answer's seconds).
	if len(delays) != callers || delays[callers-1] < time.Duration(callers-2)*interval {
		t.Errorf("delays told %v, want the last near %s", delays, time.Duration(callers-1)*interval)
	}
	for i, at := range out {
		if want := time.Duration(i)*interval - 5*time.Millisecond; at < want {
			t.Errorf("caller %d went ahead after %s, before its place in the queue at %s (all: %v, delays told %v)", i, at, want, out, delays)
		}
	}

	// A caller whose deadline comes before its place is told so at once.
	dctx, dcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer dcancel()
	for range callers { // fill the queue again
		if d, err := c.Check(ctx, client.Hit{Limit: "shaped", Key: "k2"}); err != nil || !d.Allowed {
			t.Fatalf("check: %+v, %v", d, err)
		}
	}
	if d, err := c.Wait(dctx, client.WaitOptions{}, client.Hit{Limit: "shaped", Key: "k2"}); !errors.Is(err, context.DeadlineExceeded) || !d.Allowed || d.Delay < time.Second-interval {
		t.Errorf("Wait behind a full queue with a deadline of 100ms = %+v, %v, want allowed with a delay near 1s and DeadlineExceeded", d, err)
	}
	if dctx.Err() != nil {
		t.Errorf("Wait held the call until its deadline, want its error at once")
	}
}

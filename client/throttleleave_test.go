package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestAdaptiveThrottleNotRaisedByCallersWhoLeft: callers that cancel
// their own requests (their own clients left) while a healthy backend
// works on them tell nothing of the backend: it refused nothing. They
// must not make the throttle reject the requests of the callers that
// stay, as a retry allowed by the budget whose caller left spends nothing
// of the budget (TestRetryBudgetNotSpentByCallersWhoLeft).
func TestAdaptiveThrottleNotRaisedByCallersWhoLeft(t *testing.T) {
	t.Parallel()
	var arrived atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		if r.Header.Get("X-Stay") == "" {
			// Works on the request until its caller leaves; it would
			// have answered 200.
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer ts.Close()
	th := NewAdaptiveThrottle(AdaptiveThrottleOptions{K: 2, Window: time.Minute})
	hc := &http.Client{Transport: &RetryTransport{Throttle: th, MaxAttempts: 1}}

	const leaving = 10
	rejectedLeaving := 0
	for i := range leaving {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL, nil)
		before := arrived.Load()
		done := make(chan error, 1)
		go func() {
			resp, err := hc.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		var err error
	wait:
		for deadline := time.Now().Add(5 * time.Second); arrived.Load() == before; time.Sleep(time.Millisecond) {
			select {
			case err = <-done:
				break wait // refused before it was sent
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("leaving caller %d: its request never reached the backend", i+1)
			}
		}
		cancel() // the caller's own client left
		if err == nil {
			err = <-done
		}
		switch {
		case errors.Is(err, ErrThrottled):
			rejectedLeaving++
		case !errors.Is(err, context.Canceled):
			t.Fatalf("leaving caller %d: %v, want context.Canceled", i+1, err)
		}
	}
	if rejectedLeaving > 0 {
		t.Errorf("%d of %d requests were rejected locally while every earlier one had been cancelled by its own caller, the backend having refused nothing", rejectedLeaving, leaving)
	}
	var throttled int
	for range 5 {
		req, _ := http.NewRequest(http.MethodGet, ts.URL, nil)
		req.Header.Set("X-Stay", "1")
		resp, err := hc.Do(req)
		if errors.Is(err, ErrThrottled) {
			throttled++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if throttled > 0 || th.Rejected() > 0 {
		t.Fatalf("after %d callers cancelled their own requests to a backend that refused nothing, %d of 5 requests of callers who stayed were rejected locally (reject probability now %.2f), want none",
			leaving, throttled, th.RejectProbability(time.Now()))
	}
}

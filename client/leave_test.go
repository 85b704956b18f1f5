package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/client"
	"github.com/floodgate/floodgate/httpapi"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestReservationAfterTheCallerLeft: a caller whose context ended (its
// own client went away) still settles its reservation by what its call
// cost, with "defer r.Cancel(ctx)" as the package documents it: an early
// return before the call gives the whole estimate back, a call that went
// and was settled pays what it used. Neither holds the estimate until the
// TTL, and a deferred Cancel never gives back a cost the caller settled.
func TestReservationAfterTheCallerLeft(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		used  int64 // settled after the caller left; -1: an early return
		wantC int64 // the units the limit holds afterwards
	}{
		{"early return", -1, 0},
		{"settled after the call", 100, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			hc := serve(t, tokensAPI(t))

			ctx, leave := context.WithCancel(context.Background())
			func() {
				res, err := hc.Reserve(ctx, time.Hour, client.Hit{Limit: "tokens", Key: "k", Cost: 800})
				if err != nil || !res.Allowed {
					t.Fatalf("reserve: %+v %v", res, err)
				}
				defer res.Cancel(ctx)
				leave() // the caller's own client goes away
				if c.used >= 0 {
					_, _ = res.Settle(ctx, c.used) // the call went, and used this much
				}
			}()
			if held := heldTokens(t, hc); held != c.wantC {
				t.Fatalf("after the caller left (%s), the reservation of 800 holds %d, want %d", c.name, held, c.wantC)
			}
		})
	}
}

// TestCancelAfterAFailedSettle: a Settle that fails (here the service
// answers its first settle 503, as a service between restarts might)
// leaves the reservation to settle again, and the Cancel that "defer
// r.Cancel(ctx)" runs next sends that Settle again: the call went and
// pays what it used, not 0.
func TestCancelAfterAFailedSettle(t *testing.T) {
	t.Parallel()
	api := tokensAPI(t)
	var settles atomic.Int32
	hc := serve(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/v1/settle" && settles.Add(1) == 1 {
			http.Error(w, `{"error":"restarting"}`, http.StatusServiceUnavailable)
			return
		}
		api.ServeHTTP(w, req)
	}))

	ctx := context.Background()
	func() {
		res, err := hc.Reserve(ctx, time.Hour, client.Hit{Limit: "tokens", Key: "k", Cost: 800})
		if err != nil || !res.Allowed {
			t.Fatalf("reserve: %+v %v", res, err)
		}
		defer res.Cancel(ctx)
		if _, err := res.Settle(ctx, 100); err == nil {
			t.Fatal("the first settle was answered 503 and did not fail")
		}
	}()
	if held := heldTokens(t, hc); held != 100 || settles.Load() != 2 {
		t.Fatalf("after a failed settle of 100 and a deferred cancel: %d held, %d settles sent; want 100 held, 2 sent", held, settles.Load())
	}
}

// TestReserveWhoseCallerLeavesWhileTheAnswerTravels: a Reserve whose ctx
// ends after the service made the reservation, while its answer is on
// the way (here the service holds it back a second), returns at once with
// ctx's error, and the reservation the caller will never see is given
// back rather than held at its estimate until its TTL.
func TestReserveWhoseCallerLeavesWhileTheAnswerTravels(t *testing.T) {
	t.Parallel()
	api := tokensAPI(t)
	hc := serve(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		api.ServeHTTP(w, req) // buffered: sent when the handler returns
		if req.URL.Path == "/v1/reserve" {
			time.Sleep(time.Second)
		}
	}))

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := hc.Reserve(ctx, time.Hour, client.Hit{Limit: "tokens", Key: "k", Cost: 800})
	if took := time.Since(start); err == nil || took > 800*time.Millisecond {
		t.Fatalf("a Reserve whose ctx ended at 100ms: %+v %v after %v; want ctx's error at once", res, err, took)
	}
	held := heldTokensSettled(t, hc)
	if held != 0 {
		t.Fatalf("a reservation of 800 whose caller left before its answer came holds %d, want 0", held)
	}
}

// TestWaitWhoseCallerLeavesWhileItWaits: a Wait whose ctx is cancelled
// while it sleeps for a RetryAfter of 20 minutes returns the context's error at
// once, after the one attempt it made, and that denied attempt took
// nothing: the unit left before it is still there for the next caller.
func TestWaitWhoseCallerLeavesWhileItWaits(t *testing.T) {
	t.Parallel()
	r := ruletest.With(t, floodgate.Limit{Name: "sms", Algorithm: floodgate.TokenBucket, Rate: 3, Per: time.Hour, Burst: 3}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	var checks atomic.Int64
	api := httpapi.New(memEngine(t), httpapi.Rules(r), httpapi.Options{})
	hc := serve(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/v1/check" {
			checks.Add(1)
		}
		api.ServeHTTP(w, req)
	}))
	hit := client.Hit{Limit: "sms", Key: "acct", Cost: 2}
	if d, err := hc.Check(context.Background(), hit); err != nil || !d.Allowed {
		t.Fatalf("the first 2 of 3: %+v %v", d, err)
	}

	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	denied := make(chan time.Duration, 4)
	done := make(chan error, 1)
	go func() {
		_, err := client.Wait(ctx, func(ctx context.Context) (client.Decision, error) { return hc.Check(ctx, hit) },
			client.WaitOptions{OnDenied: func(_ client.Decision, sleep time.Duration) { denied <- sleep }})
		done <- err
	}()
	select {
	case sleep := <-denied:
		if sleep < 19*time.Minute {
			t.Fatalf("Wait sleeps %s, want the 20 minutes a unit takes to come back", sleep)
		}
	case err := <-done:
		t.Fatalf("Wait returned %v before it was denied", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Wait was never denied")
	}
	left := time.Now()
	leave()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait: %v, want the context's cancellation", err)
		}
		if el := time.Since(left); el > 2*time.Second {
			t.Errorf("Wait returned %s after its caller left, want at once", el)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait still sleeps 10s after its caller left")
	}
	if n := checks.Load(); n != 2 {
		t.Errorf("the service saw %d checks, want 2 (the first, and Wait's one attempt)", n)
	}
	d, err := hc.Check(context.Background(), client.Hit{Limit: "sms", Key: "acct"})
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Errorf("the unit left before Wait: %+v %v, want it allowed with none remaining", d, err)
	}
}

// TestCancelAfterARefusedSettle: a Settle the service read and refused
// (400: a cost below 0, a limit the reservation does not hold) will be
// refused every time it is sent again, so the Cancel that "defer
// r.Cancel(ctx)" runs next ends the reservation at its estimates, what its
// TTL would keep: the tokens stay charged, and its concurrency slot comes
// back now rather than when its lease runs out a minute later.
func TestCancelAfterARefusedSettle(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		settle func(context.Context, *client.Reservation) error
	}{
		{"a cost below 0", func(ctx context.Context, r *client.Reservation) error {
			_, err := r.Settle(ctx, -1)
			return err
		}},
		{"a limit it does not hold", func(ctx context.Context, r *client.Reservation) error {
			_, err := r.SettleLimits(ctx, map[string]int64{"token": 100})
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tokens := tokensRule(t)
			slot := ruletest.With(t, floodgate.Limit{Name: "slot", Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: time.Minute}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
			ts := httptest.NewServer(httpapi.New(memEngine(t), httpapi.Rules(tokens, slot), httpapi.Options{}))
			defer ts.Close()
			hc := client.NewHTTP(ts.URL, client.HTTPOptions{Timeout: 5 * time.Second})
			hits := []client.Hit{{Limit: "tokens", Key: "k", Cost: 800}, {Limit: "slot", Key: "k"}}

			ctx := context.Background()
			var cancelErr error
			func() {
				res, err := hc.Reserve(ctx, 0, hits...)
				if err != nil || !res.Allowed {
					t.Fatalf("reserve: %+v %v", res, err)
				}
				defer func() { cancelErr = res.Cancel(ctx) }()
				var se *client.StatusError
				if err := c.settle(ctx, res); !errors.As(err, &se) || se.Code != http.StatusBadRequest {
					t.Fatalf("settle with %s: %v, want the service's 400", c.name, err)
				}
			}()
			if cancelErr != nil {
				t.Errorf("the deferred Cancel after the refused settle: %v", cancelErr)
			}
			if held := heldTokens(t, hc); held != 800 {
				t.Errorf("the reservation of 800 whose settle was refused holds %d tokens, want its estimate, 800", held)
			}
			next, err := hc.Reserve(ctx, 0, hits[1])
			if err != nil {
				t.Fatal(err)
			}
			if !next.Allowed {
				t.Fatalf("the slot of a reservation whose settle was refused, then cancelled, is still held (retry in %v)", next.RetryAfter)
			}
			if err := next.Cancel(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCancelDuringASettle: a Cancel that comes while a Settle of the same
// Reservation is on its way (a deferred Cancel beside a Settle sent from
// another goroutine) waits for it, and when that Settle fails (here the
// service answers it 503) sends it again: the call went and pays what it
// used, not its estimate until the TTL.
func TestCancelDuringASettle(t *testing.T) {
	t.Parallel()
	api := tokensAPI(t)
	var settles atomic.Int32
	arrived, release := make(chan struct{}), make(chan struct{})
	hc := serve(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/v1/settle" && settles.Add(1) == 1 {
			close(arrived)
			<-release
			http.Error(w, `{"error":"restarting"}`, http.StatusServiceUnavailable)
			return
		}
		api.ServeHTTP(w, req)
	}))

	ctx := context.Background()
	res, err := hc.Reserve(ctx, time.Hour, client.Hit{Limit: "tokens", Key: "k", Cost: 800})
	if err != nil || !res.Allowed {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	settled := make(chan error, 1)
	go func() {
		_, err := res.Settle(ctx, 100)
		settled <- err
	}()
	<-arrived
	cancelled := make(chan error, 1)
	go func() { cancelled <- res.Cancel(ctx) }()
	select {
	case err := <-cancelled: // returned while the settle was still on its way
		cancelled <- err
	case <-time.After(300 * time.Millisecond): // waits for it, or has not begun
	}
	close(release)
	if err := <-settled; err == nil {
		t.Fatal("the settle was answered 503 and did not fail")
	}
	if err := <-cancelled; err != nil {
		t.Errorf("the Cancel beside the failed settle: %v", err)
	}
	if held := heldTokens(t, hc); held != 100 || settles.Load() != 2 {
		t.Fatalf("after a settle of 100 that failed while a Cancel came: %d held, %d settles sent; want 100 held, 2 sent", held, settles.Load())
	}
}

// TestReserveWhoseCallerLeftCancelsAgain: the reservation a Reserve
// brings after its ctx ended is cancelled for the caller, who never sees
// it; when the service answers that cancel 503 (a store that failed a
// moment), it is sent again, as a deferred Cancel sends a failed Settle
// again, rather than the estimate held until the TTL.
func TestReserveWhoseCallerLeftCancelsAgain(t *testing.T) {
	t.Parallel()
	api := tokensAPI(t)
	var settles atomic.Int32
	hc := serve(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/v1/settle" && settles.Add(1) == 1 {
			http.Error(w, `{"error":"the limiter cannot decide now","code":"unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		api.ServeHTTP(w, req) // buffered: sent when the handler returns
		if req.URL.Path == "/v1/reserve" {
			time.Sleep(time.Second)
		}
	}))

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if res, err := hc.Reserve(ctx, time.Hour, client.Hit{Limit: "tokens", Key: "k", Cost: 800}); err == nil {
		t.Fatalf("a Reserve whose ctx ended at 100ms: %+v, want ctx's error", res)
	}
	held := heldTokensSettled(t, hc)
	if held != 0 || settles.Load() != 2 {
		t.Fatalf("a reservation of 800 whose caller left, its cancel answered 503 once: %d held, %d cancels sent; want 0 held, 2 sent", held, settles.Load())
	}
}

// TestSettleWhileTheServiceRestarts: a Settle sent while the service is
// down between its Reserve and the Settle (restarting on the same store:
// its reservations kept, as on Redis or its state file) cannot connect;
// it tries again until the service is back, within the client's
// timeout, rather than fail, have the deferred Cancel fail the same way
// at once, and leave the estimate charged for a call that used less.
func TestSettleWhileTheServiceRestarts(t *testing.T) {
	t.Parallel()
	api := tokensAPI(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	first := &http.Server{Handler: api}
	go func() { _ = first.Serve(lis) }()
	hc := client.NewHTTP("http://"+addr, client.HTTPOptions{Timeout: 10 * time.Second})

	ctx := context.Background()
	res, err := hc.Reserve(ctx, time.Hour, client.Hit{Limit: "tokens", Key: "k", Cost: 800})
	if err != nil || !res.Allowed {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	if err := first.Close(); err != nil { // the service stops
		t.Fatal(err)
	}
	restarted := make(chan *http.Server, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("listen again on %s: %v", addr, err)
			restarted <- nil
			return
		}
		again := &http.Server{Handler: api}
		restarted <- again
		_ = again.Serve(lis)
	}()
	func() {
		defer res.Cancel(ctx)
		if _, err := res.Settle(ctx, 100); err != nil {
			t.Logf("settle while the service restarts: %v", err)
		}
	}()
	again := <-restarted
	if again == nil {
		return
	}
	defer again.Close()
	if held := heldTokens(t, hc); held != 100 {
		t.Fatalf("a reservation of 800 settled at 100 while the service restarted holds %d, want 100", held)
	}
}

// tokensRule is the limit these tests reserve from: "tokens", a bucket
// of 1000 that refills one an hour, failing closed.
func tokensRule(t *testing.T) *limiter.Rule {
	t.Helper()
	return ruletest.With(t, floodgate.Limit{Name: "tokens", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour, Burst: 1000}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
}

// tokensAPI is the service's HTTP API over tokensRule alone, on an
// embedded store.
func tokensAPI(t *testing.T) http.Handler {
	t.Helper()
	return httpapi.New(memEngine(t), httpapi.Rules(tokensRule(t)), httpapi.Options{})
}

// serve serves h on loopback until t ends and returns an HTTP client of
// it with a timeout of 5 s.
func serve(t *testing.T, h http.Handler) *client.HTTP {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return client.NewHTTP(ts.URL, client.HTTPOptions{Timeout: 5 * time.Second})
}

// heldTokens is how many units of tokensRule key "k" holds now, by a Peek
// of hc (the Peek's own unit aside).
func heldTokens(t *testing.T, hc *client.HTTP) int64 {
	t.Helper()
	d, err := hc.Peek(context.Background(), client.Hit{Limit: "tokens", Key: "k", Cost: 1})
	if err != nil {
		t.Fatal(err)
	}
	return 1000 - 1 - d.Remaining
}

// heldTokensSettled is heldTokens once it is 0, or after 5 s of asking
// every 20 ms: a reservation given back for a caller who left is given
// back a moment after the caller's call returned.
func heldTokensSettled(t *testing.T, hc *client.HTTP) int64 {
	t.Helper()
	var held int64
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if held = heldTokens(t, hc); held == 0 || time.Now().After(end) {
			return held
		}
	}
}

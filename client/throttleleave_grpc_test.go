package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/client"
)

// TestRetryInterceptorThrottleNotRaisedByCallersWhoLeft: the gRPC twin of
// TestAdaptiveThrottleNotRaisedByCallersWhoLeft. Callers that cancel their
// calls while a healthy service works on them (it answers OK to every
// call) must not make the throttle reject the calls of callers that stay.
func TestRetryInterceptorThrottleNotRaisedByCallersWhoLeft(t *testing.T) {
	t.Parallel()
	svc := &quotaService{next: func(n int, _ string) outcome {
		if n <= 10 {
			time.Sleep(300 * time.Millisecond) // at work when its caller leaves
		}
		return outcome{}
	}}
	th := client.NewAdaptiveThrottle(client.AdaptiveThrottleOptions{K: 2, Window: time.Minute})
	conn := startQuota(t, svc, &client.RetryInterceptor{Throttle: th, MaxAttempts: 1})
	rejected := 0
	for range 10 {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		err := call(ctx, conn, "x")
		cancel()
		switch {
		case errors.Is(err, client.ErrThrottled):
			rejected++
		case status.Code(err) != codes.Canceled:
			t.Fatalf("a caller who left: %v, want CANCELLED", err)
		}
	}
	for range 5 {
		if err := call(context.Background(), conn, "x"); errors.Is(err, client.ErrThrottled) {
			rejected++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if rejected > 0 || th.Rejected() > 0 {
		t.Fatalf("%d calls rejected locally (of 10 cancelled by their callers and 5 whose callers stayed) by a throttle whose service refused nothing (reject probability now %.2f), want none",
			rejected, th.RejectProbability(time.Now()))
	}
}

package grpcguard_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestQueuedPastDeadlineIsRefused: a call whose place in a leaky queue
// comes after its deadline is refused at once, RESOURCE_EXHAUSTED with a
// RetryInfo and the RateLimit fields, as the HTTP fronts refuse a request
// whose place would come past their write deadline: held, it would reach
// its handler (or end DEADLINE_EXCEEDED) when its answer can no longer
// reach its client, its place taken from the calls behind it meanwhile.
func TestQueuedPastDeadlineIsRefused(t *testing.T) {
	e, conn := start(t)
	// One an hour with room for two: the first call goes at once, the
	// second's place comes an hour later, long past its deadline.
	if _, _, err := say(ctxWith(t), conn, "Queued", "first"); err != nil {
		t.Fatalf("first call: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, tr, err := say(ctx, conn, "Queued", "second")
	if code := status.Code(err); code != codes.ResourceExhausted {
		t.Fatalf("a call queued past its deadline: %v, want RESOURCE_EXHAUSTED at once", err)
	}
	if d, ok := retryInfo(err); !ok || d < 50*time.Minute || d > time.Hour {
		t.Errorf("RetryInfo %v (present %v), want the time after which its place would come within its deadline, about an hour", d, ok)
	}
	if first(tr, "retry-after") == "" || first(tr, "ratelimit") == "" {
		t.Errorf("trailer %v, want retry-after and ratelimit", tr)
	}
	if n := e.calls.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1 (the first call only)", n)
	}
}

package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/limiter"
)

// TestCloseTwice: a store closed twice (a deferred Close beside the one of
// a shutdown) does not panic, and a store closed answers every call with
// an error at once, so that the engine decides by the failure policies.
func TestCloseTwice(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s, err := New(Options{URL: "redis://" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	r, err := limiter.NewRule(floodgate.Limit{Name: "x", Algorithm: floodgate.TokenBucket, Rate: 10, Per: time.Second, Burst: 10}, floodgate.FailClosed, false)
	if err != nil {
		t.Fatal(err)
	}
	hits := []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}
	out := make([]floodgate.Decision, 1)
	if err := s.Decide(context.Background(), hits, false, out); err != nil || !out[0].Allowed {
		t.Fatalf("decide before Close: %+v %v", out[0], err)
	}
	for i := 1; i <= 2; i++ {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("Close #%d: panic: %v", i, p)
				}
			}()
			s.Close()
		}()
		if err := s.Decide(context.Background(), hits, false, out); err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("decide after Close #%d: %v, want the closed client's error at once", i, err)
		}
	}
}

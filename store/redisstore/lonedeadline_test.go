package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestShortDeadlineSparesTheOthers: a request whose own deadline passes
// while its call is in flight (a caller with a short deadline, such as
// Envoy's 20 ms, answered late by Redis, or read late by this process)
// ends alone: the connection stays, and a request sent beside it with
// time to spare gets Redis' answer.
func TestShortDeadlineSparesTheOthers(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Options{URL: "redis://" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := ruletest.Rule(t, floodgate.Limit{Name: "short", Algorithm: floodgate.TokenBucket, Rate: 100, Per: time.Second, Burst: 100})
	apply := func(key string, d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return s.Decide(ctx, []limiter.Hit{{Rule: r, Key: key, Cost: 1}}, false, make([]floodgate.Decision, 1))
	}
	if err := apply("warm", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	short := make(chan error, 1)
	go func() { short <- apply("a", 100*time.Millisecond) }()
	time.Sleep(20 * time.Millisecond)
	spare := make(chan error, 1)
	go func() { spare <- apply("b", 10*time.Second) }()
	if err := <-short; err == nil {
		t.Fatal("a call to a stopped Redis passed")
	}
	time.Sleep(50 * time.Millisecond)
	srv.Resume()
	resumed = true
	if err := <-spare; err != nil {
		t.Fatalf("a request with 10 s to spare, beside one whose 100 ms deadline passed: %v", err)
	}
}

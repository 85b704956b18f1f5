package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestBatchOfMoreThan8000Keys: 128 requests of 64 hits each (the most
// descriptors Envoy's rate-limit service takes in one request) queued
// behind a call that a paused server holds go in one script call of 8,192
// keys, and each is decided. The script read the keys' states with one
// unpack of all of them, which Lua's C stack refuses past about 8,000:
// the call failed ("too many results to unpack"), and with it every
// request batched in it, whoever sent them.
func TestBatchOfMoreThan8000Keys(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Options{URL: "redis://" + srv.Addr, BatchesInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := ruletest.With(t, floodgate.Limit{Name: "wide", Algorithm: floodgate.FixedWindow, Max: 1000, Window: time.Hour},
		limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	avoidHourBoundary()
	const reqs, hits = DefaultMaxBatch, 64
	decide := func(req int) error {
		hs := make([]limiter.Hit, hits)
		for i := range hs {
			hs[i] = limiter.Hit{Rule: r, Key: fmt.Sprintf("r%d-h%d", req, i), Cost: 1}
		}
		return s.Decide(context.Background(), hs, false, make([]floodgate.Decision, hits))
	}
	if err := decide(-1); err != nil { // loads the script
		t.Fatal(err)
	}
	srv.Pause()
	errs := make(chan error, reqs+1)
	go func() { errs <- decide(-2) }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if calls, _ := s.Calls(); calls == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first request was not sent")
		}
		time.Sleep(time.Millisecond)
	}
	for i := range reqs {
		go func() { errs <- decide(i) }()
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		s.single.mu.Lock()
		pending := len(s.single.pending)
		s.single.mu.Unlock()
		if pending == reqs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests waiting, want %d", pending, reqs)
		}
		time.Sleep(time.Millisecond)
	}
	srv.Resume()
	failed := 0
	for range reqs + 1 {
		if err := <-errs; err != nil {
			failed++
			if failed == 1 {
				t.Error(err)
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d requests failed", failed, reqs+1)
	}
	if calls, _ := s.Calls(); calls != 3 {
		t.Errorf("%d script calls, want 3: the %d waiting requests in one", calls, reqs)
	}
	out := make([]floodgate.Decision, 1)
	if err := s.Decide(context.Background(), []limiter.Hit{{Rule: r, Key: fmt.Sprintf("r%d-h%d", reqs-1, hits-1), Cost: 1}}, true, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Remaining != 1000-2 { // a peek answers as if it charged
		t.Errorf("the last key of the batch: %+v, want it charged once", out[0])
	}
}

package limiter_test

import (
	"context"
	"testing"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// TestGroupVerdict: the engine's verdict of a request with a group of hits
// (which stop it only together) and checks (decided, never charged).
func TestGroupVerdict(t *testing.T) {
	t.Parallel()
	lim := limiter.New(newMem(t), limiter.Options{})
	ctx := context.Background()
	a := bucket(t, "a", 1, floodgate.FailOpen)
	b := bucket(t, "b", 3, floodgate.FailOpen)
	c := window(t, "c", 100, floodgate.FailOpen)
	decide := func(hits ...limiter.Hit) limiter.Result {
		t.Helper()
		var r limiter.Result
		if err := lim.Decide(ctx, &limiter.Request{Hits: hits}, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	ga := limiter.Hit{Rule: a, Key: "k", Cost: 1, Group: 1}
	gb := limiter.Hit{Rule: b, Key: "k", Cost: 1, Group: 1}
	hc := limiter.Hit{Rule: c, Key: "k", Cost: 1}
	decide(ga) // a is full now
	r := decide(ga, gb, hc)
	if !r.Allowed || r.Decisions[0].Allowed || !r.Decisions[1].Allowed || r.Binding != 1 {
		t.Fatalf("a full, b with room: %+v, want allowed, bound by b (2 left)", r)
	}
	decide(gb)
	decide(gb) // b is full too
	r = decide(ga, gb, hc)
	if r.Allowed || r.Binding != 0 || r.RetryAfter <= 0 || r.RetryAfter > hour {
		t.Fatalf("a and b full: %+v, want denied, bound by a, retry within an hour", r)
	}
	// The group's wait is its shortest: a refills in an hour, b in an
	// hour too but its retry counts from later charges; RetryAfter is no
	// longer than either.
	if ra, rb := r.Decisions[0].RetryAfter, r.Decisions[1].RetryAfter; r.RetryAfter != min(ra, rb) {
		t.Fatalf("RetryAfter %v, want the shorter of %v and %v", r.RetryAfter, ra, rb)
	}
	if d := r.Decisions[2]; !d.Allowed || d.Remaining != 99 {
		t.Fatalf("c in a denied request: %+v, want its 99 units left as before (1 taken by the allowed request)", d)
	}
	// A check: decided, reports the units free now, takes nothing.
	check := limiter.Hit{Rule: c, Key: "k", Cost: 1, Check: true}
	for range 3 {
		if r := decide(check); !r.Allowed || r.Decisions[0].Remaining != 99 {
			t.Fatalf("check: %+v, want allowed with the 99 units free now", r)
		}
	}
}

// TestCheckNotCachedAsFilled: a check that finds the last unit of a fixed
// window free takes nothing, so the deny cache must not take the window
// for full: the next request gets that unit.
func TestCheckNotCachedAsFilled(t *testing.T) {
	t.Parallel()
	st := &testStore{inner: newMem(t)} // not in process: the engine keeps a deny cache
	lim := limiter.New(st, limiter.Options{})
	ctx := context.Background()
	w := window(t, "w", 2, floodgate.FailOpen)
	var r limiter.Result
	if err := lim.Decide(ctx, &limiter.Request{Hits: []limiter.Hit{{Rule: w, Key: "k", Cost: 1}}}, &r); err != nil || !r.Allowed {
		t.Fatalf("first: %+v %v", r, err)
	}
	if err := lim.Decide(ctx, &limiter.Request{Hits: []limiter.Hit{{Rule: w, Key: "k", Cost: 1, Check: true}}}, &r); err != nil || !r.Allowed || r.Decisions[0].Remaining != 1 {
		t.Fatalf("check of the last unit: %+v %v, want allowed with 1 left", r, err)
	}
	if err := lim.Decide(ctx, &limiter.Request{Hits: []limiter.Hit{{Rule: w, Key: "k", Cost: 1}}}, &r); err != nil || !r.Allowed {
		t.Fatalf("the last unit after a check: %+v %v, want allowed", r, err)
	}
}

package redisstore

import (
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestEveryKeyHasTTL charges, peeks, denies and releases on every
// algorithm, then looks at every key the store wrote: each must expire.
func TestEveryKeyHasTTL(t *testing.T) {
	srv := sharedServer(t)
	s := newStandalone(t)
	ctx := context.Background()
	rules := conformLimits(t)
	for _, r := range rules {
		for i := 0; i < 3*int(r.Params().Capacity()); i++ {
			for _, op := range []scriptOp{opCharge, opPeek, opRelease} {
				if op == opRelease && r.Algorithm() != floodgate.Concurrency {
					continue
				}
				hits := []limiter.Hit{{Rule: r, Key: "ttl" + strconv.Itoa(i%3), Cost: 1, Lease: uint64(i % 4)}}
				out := make([]floodgate.Decision, 1)
				if err := applyOp(ctx, s, op, hits, out); err != nil {
					t.Fatalf("%s: %v", r.ID(), err)
				}
			}
		}
	}
	keys, err := srv.Do("KEYS", s.prefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	list := strings.Fields(keys)
	if len(list) < len(rules) {
		t.Fatalf("only %d keys written for %d rules", len(list), len(rules))
	}
	for _, k := range list {
		ttl, err := srv.Do("PTTL", k)
		if err != nil {
			t.Fatal(err)
		}
		// -1 is a key without a TTL. -2: the key expired between KEYS
		// and PTTL, so it had one; 0: it expires within the millisecond.
		if n, err := strconv.Atoi(ttl); err != nil || n == -1 || n < -2 {
			t.Fatalf("key %s has PTTL %s; every key must expire", k, ttl)
		}
	}
	t.Logf("%d keys, all with a TTL", len(list))
}

// TestFixedWindowKeepsItsTTL: a fixed window's key written again within
// its window keeps the TTL of the window's end (written with KEEPTTL),
// also when a batch writes a fresh key twice, first with its TTL.
func TestFixedWindowKeepsItsTTL(t *testing.T) {
	srv := sharedServer(t)
	s := newStandalone(t)
	ctx := context.Background()
	r := ruletest.Rule(t, floodgate.Limit{Name: "keepttl", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
	avoidHourBoundary()
	pttl := func(key string) int {
		t.Helper()
		return positivePTTL(t, srv, s.Key(r, key), "one until its window ends")
	}
	hits := []limiter.Hit{{Rule: r, Key: "a", Cost: 1}, {Rule: r, Key: "b", Cost: 1}}
	out := make([]floodgate.Decision, 1)
	since := time.Now()
	if err := s.Decide(ctx, hits[:1], false, out); err != nil {
		t.Fatal(err)
	}
	first := pttl("a")
	// The TTL runs down between the decision and its reading.
	left := int(out[0].ResetAfter/time.Millisecond) - elapsedMs(since)
	if first < left || first > left+2000 {
		t.Fatalf("PTTL %d ms after the first charge, want the window's end, %d ms away", first, left)
	}
	// The server's clock may not move by a millisecond between two
	// charges: push the TTL back to tell a kept TTL from one written anew.
	if _, err := srv.Do("PEXPIRE", s.Key(r, "a"), strconv.Itoa(first+60000)); err != nil {
		t.Fatal(err)
	}
	if err := s.Decide(ctx, hits[:1], false, out); err != nil {
		t.Fatal(err)
	}
	if got := pttl("a"); got < first+50000 {
		t.Fatalf("PTTL %d ms after a charge in the same window, want the key's TTL kept (about %d)", got, first+60000)
	}
	// One batch charging a fresh key twice: the second write keeps the
	// TTL the first gives it.
	chargeInOneBatch(t, s, hits[1], 2)
	pttl("b")
}

// TestRateKeyTTL: a rate algorithm's key expires two to three seconds
// after its bucket is full again (apply.lua's LEAD); a charge that leaves
// that deadline at least two seconds past the bucket's new full moment
// keeps the key's TTL (KEEPTTL), one that comes closer sets a new one; and
// a state spelt as older scripts and refunds write it (nanoseconds in
// [0, 10^9), no deadline) decides the same and gets a TTL on its next
// write.
func TestRateKeyTTL(t *testing.T) {
	srv := sharedServer(t)
	s := newStandalone(t)
	ctx := context.Background()
	// 10 a second, burst 100: each unit charged adds 100 ms to the time
	// until the bucket is full again.
	r := ruletest.Rule(t, floodgate.Limit{Name: "leadttl", Algorithm: floodgate.TokenBucket, Rate: 10, Per: time.Second, Burst: 100})
	pttl := func(key string) int {
		t.Helper()
		return positivePTTL(t, srv, s.Key(r, key), "one past the bucket's full moment")
	}
	var sent time.Time // when the last charge was sent
	charge := func(cost int64, keys ...string) []floodgate.Decision {
		t.Helper()
		hits := make([]limiter.Hit, len(keys))
		for i, k := range keys {
			hits[i] = limiter.Hit{Rule: r, Key: k, Cost: cost}
		}
		out := make([]floodgate.Decision, len(hits))
		sent = time.Now()
		if err := s.Decide(ctx, hits, false, out); err != nil {
			t.Fatal(err)
		}
		for i := range out {
			if !out[i].Allowed {
				t.Fatalf("charge of %d on %s denied: %+v", cost, keys[i], out[i])
			}
		}
		return out
	}
	// inRange checks a PTTL read after the last charge, which set the
	// bucket full in full: at least past ms and at most 3 s past that,
	// less the time gone by since the charge was sent. A new deadline is
	// LEAD (3) seconds past the second of that moment, so 2 to 3 s past
	// it (within); a kept one is at least 2 s past that second, so more
	// than 1 s past the moment.
	inRange := func(what string, got int, full time.Duration, past int) {
		t.Helper()
		lo, hi := int(full/time.Millisecond)+past-elapsedMs(sent), int(full/time.Millisecond)+3000+5
		if got < lo || got > hi {
			t.Fatalf("%s: PTTL %d ms with the bucket full in %v, want %d..%d", what, got, full, lo, hi)
		}
	}
	within := func(what string, got int, full time.Duration) { t.Helper(); inRange(what, got, full, 2000) }

	d := charge(1, "a")[0]
	first := pttl("a")
	within("first charge", first, d.ResetAfter)
	// Push the TTL back to tell a kept TTL from one written anew.
	if _, err := srv.Do("PEXPIRE", s.Key(r, "a"), strconv.Itoa(first+60000)); err != nil {
		t.Fatal(err)
	}
	charge(1, "a")
	if got := pttl("a"); got < first+50000 {
		t.Fatalf("PTTL %d ms after a charge that moved the full moment by 100 ms, want the TTL kept (about %d)", got, first+60000)
	}
	d = charge(40, "a")[0] // 4 s more: past the deadline
	within("a charge past the deadline", pttl("a"), d.ResetAfter)

	// The older spelling of the same state, on key b; key c keeps this
	// one. Both carry a TTL longer than their deadline.
	raw, err := srv.Do("GET", s.Key(r, "a"))
	if err != nil || len(raw) != 24 {
		t.Fatalf("state %q, %v: want 24 bytes", raw, err)
	}
	f := func(i int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64([]byte(raw[8*i:]))) }
	sec, ns, rem := f(0), f(1), f(2)
	if ns >= 0 {
		t.Fatalf("state (%v s, %v ns): want the deadline's spelling, below zero ns", sec, ns)
	}
	q := math.Floor(ns / 1e9)
	old := make([]byte, 0, 24)
	for _, v := range []float64{sec + q, ns - q*1e9, rem} {
		old = binary.LittleEndian.AppendUint64(old, math.Float64bits(v))
	}
	for key, v := range map[string]string{"b": string(old), "c": raw} {
		if _, err := srv.Do("SET", s.Key(r, key), v, "PX", "600000"); err != nil {
			t.Fatal(err)
		}
	}
	out := charge(1, "b", "c") // one request: one instant for both
	if out[0] != out[1] {
		t.Fatalf("the two spellings decide apart: %+v and %+v", out[0], out[1])
	}
	within("the older spelling's next write", pttl("b"), out[0].ResetAfter)
	if got := pttl("c"); got < 500000 {
		t.Fatalf("PTTL %d ms of a state with its deadline, want its TTL kept (about 600000)", got)
	}

	// One batch charging a fresh key twice: the second write keeps the
	// TTL the first gives it (unless the first's deadline is too near),
	// so the key outlives the bucket's full moment by more than 1 s (2 s
	// unless that moment moved into the next second).
	sent = time.Now()
	chargeInOneBatch(t, s, limiter.Hit{Rule: r, Key: "d", Cost: 1}, 2)
	inRange("a batch's two charges of a fresh key", pttl("d"), 200*time.Millisecond, 1000)
}

// chargeInOneBatch charges h n times in one script call (one batch of n
// requests), each of which must be charged.
func chargeInOneBatch(t *testing.T, s *Store, h limiter.Hit, n int) {
	t.Helper()
	hits := []limiter.Hit{h}
	batch := make([]*request, n)
	for i := range batch {
		rq := getRequest()
		rq.idx = append(rq.idx[:0], 0)
		s.prepare(opCharge, hits, rq, false)
		batch[i] = rq
	}
	s.exec(context.Background(), batch)
	for _, rq := range batch {
		if rq.err != nil || rq.got != 1 {
			t.Fatalf("batch: charged %d, %v", rq.got, rq.err)
		}
		putRequest(rq)
	}
}

// positivePTTL returns the PTTL of key in ms, which must be above zero
// (want says what it should be).
func positivePTTL(t *testing.T, srv *redistest.Server, key, want string) int {
	t.Helper()
	v, err := srv.Do("PTTL", key)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("key %s has PTTL %s, want %s", key, v, want)
	}
	return n
}

// elapsedMs is the whole milliseconds since t, and one more: what a TTL
// read now may have run down since t.
func elapsedMs(t time.Time) int { return int(time.Since(t)/time.Millisecond) + 1 }

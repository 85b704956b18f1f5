package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// checkIndex verifies the shard's index: every slot's distance is its
// entry's distance from home, the run from home to the slot has no gap, and
// every live entry is found.
func (s *Store) checkIndex(t *testing.T, sh *shard) {
	t.Helper()
	mask := uint32(len(sh.slots) - 1)
	live := 0
	for pos, v := range sh.slots {
		if v == 0 {
			if sh.dist[pos] != 0 {
				t.Fatalf("empty slot %d has distance %d", pos, sh.dist[pos])
			}
			continue
		}
		live++
		e := sh.at(int32(v&idxMask) - 1)
		h := s.hash(e.rule.ID(), e.key)
		home := uint32(h) & mask
		if d := (uint32(pos) - home) & mask; d != uint32(sh.dist[pos]) {
			t.Fatalf("slot %d: distance %d recorded, %d real", pos, sh.dist[pos], d)
		}
		for p := home; p != uint32(pos); p = (p + 1) & mask {
			if sh.slots[p] == 0 {
				t.Fatalf("slot %d: gap at %d in its probe run", pos, p)
			}
		}
		if got := sh.find(h, e.rule, e.key); got != int32(v&idxMask)-1 {
			t.Fatalf("entry %q not found (%d)", e.key, got)
		}
	}
	if live != int(sh.n) {
		t.Fatalf("%d slots used, %d live entries", live, sh.n)
	}
	bytes := sh.structBytes()
	for i := range sh.used {
		if e := sh.at(i); e.rule != nil {
			bytes += keyCost(e.key, &e.st)
		}
	}
	if bytes != sh.bytes {
		t.Fatalf("shard counts %d bytes, its entries add up to %d", sh.bytes, bytes)
	}
	var keyBytes int64
	for i := range sh.used {
		if e := sh.at(i); e.rule != nil {
			keyBytes += int64(len(e.key))
		}
	}
	if a := &sh.keys; a.live != keyBytes || a.alloc > a.bytes() || a.dead > a.live/4 {
		t.Fatalf("key arena: %d live bytes (entries: %d), %d removed, %d allocated, bound %d", a.live, keyBytes, a.dead, a.alloc, a.bytes())
	}
}

// TestIndexInvariants drives one shard through inserts, evictions, expiry
// sweeps and growth, checking the index after each step.
func TestIndexInvariants(t *testing.T) {
	t.Parallel()
	now := int64(1e18)
	s, err := New(Options{Shards: 1, MaxKeys: 300, SweepInterval: -1, Now: func() int64 { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fixed := ruletest.Rule(t, floodgate.Limit{Name: "f", Algorithm: floodgate.FixedWindow, Max: 1000, Window: 1000 * time.Hour})
	short := ruletest.Rule(t, floodgate.Limit{Name: "s", Algorithm: floodgate.GCRA, Rate: 1, Per: time.Second, Burst: 1})
	rng := rand.New(rand.NewPCG(7, 8))
	out := make([]floodgate.Decision, 1)
	for i := range 6000 {
		r := fixed
		if rng.IntN(3) == 0 {
			r = short
		}
		k := rng.IntN(900)
		// Keys of every length, some longer than an arena page's share.
		key := strconv.Itoa(k) + strings.Repeat("x", k%7*k%(2*arenaLong))
		hits := []limiter.Hit{{Rule: r, Key: key, Cost: 1}}
		if err := s.Decide(context.Background(), hits, false, out); err != nil {
			t.Fatal(err)
		}
		if i%500 == 0 {
			now += int64(2 * time.Second) // the short keys go idle
			s.Sweep()
		}
		s.checkIndex(t, &s.shards[0])
	}
	if st := s.Stats(); st.Evictions == 0 || st.Expired == 0 {
		t.Fatalf("stats %+v: the workload should both evict and expire", st)
	}
}

// TestEntrySize guards the per-key memory budget.
func TestEntrySize(t *testing.T) {
	t.Parallel()
	if size := unsafe.Sizeof(entry{}); unsafe.Sizeof(uintptr(0)) == 8 && size != 80 {
		t.Fatalf("entry is %d bytes, want 80", size)
	}
	if off := unsafe.Offsetof(shardState{}.chunks); unsafe.Sizeof(uintptr(0)) == 8 && off != 64 {
		t.Fatalf("a shard's hot fields end at byte %d, want 64", off)
	}
	if size := unsafe.Sizeof(shard{}); size%cacheLine != 0 {
		t.Fatalf("shard is %d bytes, not a multiple of %d", size, cacheLine)
	}
}

// TestWallClock checks the default clock against time.Now and its order.
func TestWallClock(t *testing.T) {
	t.Parallel()
	c := newWallClock()
	prev := c.now()
	for range 1000 {
		n := c.now()
		if n < prev {
			t.Fatalf("clock went back from %d to %d", prev, n)
		}
		prev = n
	}
	c.sync()
	if d := time.Duration(c.now() - time.Now().UnixNano()); d < -time.Minute || d > time.Minute {
		t.Fatalf("clock is %v off the wall clock", d)
	}
}

// TestByteBudget grows sliding logs and leases under a byte cap and checks
// the accounting after every step.
func TestByteBudget(t *testing.T) {
	t.Parallel()
	now := int64(1e18)
	const budget = 64 * 1024
	s, err := New(Options{Shards: 1, MaxBytes: budget, SweepInterval: -1, Now: func() int64 { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	lg := ruletest.Rule(t, floodgate.Limit{Name: "log", Algorithm: floodgate.SlidingLog, Max: 500, Window: time.Hour})
	cc := ruletest.Rule(t, floodgate.Limit{Name: "conc", Algorithm: floodgate.Concurrency, Max: 100, LeaseTTL: time.Hour})
	fixed := ruletest.Rule(t, floodgate.Limit{Name: "f", Algorithm: floodgate.FixedWindow, Max: 1000, Window: time.Hour})
	rng := rand.New(rand.NewPCG(9, 10))
	out := make([]floodgate.Decision, 2)
	for i := range 5000 {
		now += int64(time.Millisecond) // every log entry its own instant
		k := strconv.Itoa(rng.IntN(40))
		var hits []limiter.Hit
		switch rng.IntN(4) {
		case 0:
			hits = []limiter.Hit{{Rule: cc, Key: k, Cost: 1, Lease: uint64(i + 1)}}
		case 1:
			hits = []limiter.Hit{{Rule: cc, Key: k, Cost: 1, Lease: uint64(i - rng.IntN(50))}}
			if err := s.Release(context.Background(), hits); err != nil {
				t.Fatal(err)
			}
			s.checkIndex(t, &s.shards[0])
			continue
		case 2:
			hits = []limiter.Hit{{Rule: lg, Key: k, Cost: 1}, {Rule: fixed, Key: k, Cost: 1}}
		default:
			hits = []limiter.Hit{{Rule: lg, Key: k, Cost: 1}}
		}
		if err := s.Decide(context.Background(), hits, false, out[:len(hits)]); err != nil {
			t.Fatal(err)
		}
		s.checkIndex(t, &s.shards[0])
		if b := s.Stats().Bytes; b > budget {
			t.Fatalf("step %d: %d bytes counted, over the budget %d", i, b, budget)
		}
	}
	if st := s.Stats(); st.Evictions == 0 {
		t.Fatalf("stats %+v: the logs should have outgrown the budget", st)
	}
}

// TestCoarseClock checks the cached default clock: it follows the system
// clock while it is read, stops refreshing when nobody reads it and starts
// again on the next read, and reads the system clock itself after Close.
// It runs in a synctest bubble, so the clock's ticker and the system clock
// it reads are both the bubble's fake clock, and every step is exact.
func TestCoarseClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, err := New(Options{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() }) // if the test ends before its own Close
		c := s.clock
		if c == nil {
			t.Fatal("no cached clock without Options.Now")
		}
		wall := func() int64 { return time.Now().UnixNano() }
		// The store starts with a parked clock: the first read is the
		// system clock's, and wakes the goroutine.
		if n, w := c.now(), wall(); n != w {
			t.Fatalf("first read %d, want the system clock's %d", n, w)
		}
		// While read, it keeps up with the system clock: never behind it by
		// more than a tick, never ahead, never back. The reads fall half a
		// step off the ticks: a read at a tick's instant would race the
		// clock's goroutine, which marks the clock unread there, between
		// the read and the look at its state.
		prev := c.now()
		time.Sleep(clockTick / 20)
		for range 200 {
			time.Sleep(clockTick / 10)
			n, w := c.now(), wall()
			if n < prev || n > w || w-n > int64(clockTick) {
				t.Fatalf("read %d after %d, system clock %d: want within a tick behind it, never back", n, prev, w)
			}
			if st := c.state.Load(); st != clockBusy {
				t.Fatalf("clock state %d while read, want busy", st)
			}
			prev = n
		}
		// Unread for two ticks, the goroutine stops refreshing.
		time.Sleep(2 * clockTick)
		synctest.Wait()
		if st := c.state.Load(); st != clockParked {
			t.Fatalf("clock state %d after two ticks unread, want parked", st)
		}
		// Parked, it stays stale however long nobody reads it; a read is
		// then the system clock's, and wakes the goroutine again.
		stale := c.cached.Load()
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := c.cached.Load(); got != stale {
			t.Fatalf("parked clock refreshed from %d to %d", stale, got)
		}
		if n, w := c.now(), wall(); n != w {
			t.Fatalf("parked clock read %d, want the system clock's %d", n, w)
		}
		if st := c.state.Load(); st != clockBusy {
			t.Fatalf("clock state %d after a read of a parked clock, want busy", st)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if st := c.state.Load(); st != clockStopped {
			t.Fatalf("clock state %d after Close, want stopped", st)
		}
		// After Close every read is the system clock's.
		time.Sleep(5 * time.Millisecond)
		if n, w := c.now(), wall(); n != w {
			t.Fatalf("read %d after Close, want the system clock's %d", n, w)
		}
	})
}

// has reports whether the store holds key of rule r.
func (s *Store) has(r *limiter.Rule, key string) bool {
	h := s.hash(r.ID(), key)
	sh := &s.shards[h>>s.shift]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.find(h, r, key) >= 0
}

// TestEvictionOrder fills a shard small enough that an eviction weighs
// every key, and checks the order in which keys go to make room: first
// those whose state equals a fresh key's, then by how little of their
// limit they hold, and a denying key only once every key is denying.
func TestEvictionOrder(t *testing.T) {
	t.Parallel()
	now := int64(1e18)
	const capKeys = 8
	if capKeys > evictSample {
		t.Fatalf("a shard of %d keys is more than an eviction weighs (%d)", capKeys, evictSample)
	}
	s, err := New(Options{Shards: 1, MaxKeys: capKeys, SweepInterval: -1, Now: func() int64 { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bucket := ruletest.Rule(t, floodgate.Limit{Name: "bucket", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Second, Burst: 1})
	window := ruletest.Rule(t, floodgate.Limit{Name: "window", Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Hour})
	charge := func(r *limiter.Rule, key string, cost int64) floodgate.Decision {
		t.Helper()
		out := make([]floodgate.Decision, 1)
		if err := s.Decide(context.Background(), []limiter.Hit{{Rule: r, Key: key, Cost: cost}}, false, out); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	// want checks whether the keys named prefix0..prefixN-1 are held.
	want := func(step string, r *limiter.Rule, prefix string, n int, held bool) {
		t.Helper()
		for i := range n {
			if k := fmt.Sprint(prefix, i); s.has(r, k) != held {
				t.Fatalf("%s: key %s held: %v, want %v (stats %+v)", step, k, !held, held, s.Stats())
			}
		}
	}
	// Two keys whose buckets will be full again, then keys holding 1, 5
	// and 9 of 10, and one that used up its 10 and was denied.
	for i := range 2 {
		charge(bucket, fmt.Sprint("idle", i), 1)
	}
	now += int64(2 * time.Second) // every bucket is full again
	for i := range 2 {
		charge(window, fmt.Sprint("light", i), 1)
		charge(window, fmt.Sprint("heavy", i), 9)
	}
	charge(window, "medium0", 5)
	charge(window, "attacker", 10)
	if d := charge(window, "attacker", 1); d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("attacker's 11th unit: %+v, want denied", d)
	}
	if st := s.Stats(); st.Keys != capKeys {
		t.Fatalf("%d keys, want the cap %d", st.Keys, capKeys)
	}
	// New keys holding 3 of 10: first the idle keys make room, at no
	// cost, then the light ones, then the new keys themselves.
	for i := range 2 {
		charge(window, fmt.Sprint("new", i), 3)
	}
	want("after 2 new keys", bucket, "idle", 2, false)
	want("after 2 new keys", window, "light", 2, true)
	if st := s.Stats(); st.Expired != 2 || st.Evictions != 0 {
		t.Fatalf("after 2 new keys: %+v, want 2 idle keys removed and nothing evicted", st)
	}
	for i := 2; i < 4; i++ {
		charge(window, fmt.Sprint("new", i), 3)
	}
	want("after 4 new keys", window, "light", 2, false)
	want("after 4 new keys", window, "new", 4, true)
	for i := 4; i < 20; i++ {
		charge(window, fmt.Sprint("new", i), 3)
	}
	want("after 20 new keys", window, "medium", 1, true)
	want("after 20 new keys", window, "heavy", 2, true)
	// Keys that used up their limits but were not denied go after every
	// key that holds less, and before the denying one.
	for i := range 20 {
		charge(window, fmt.Sprint("full", i), 10)
	}
	want("after 20 full keys", window, "medium", 1, false)
	want("after 20 full keys", window, "heavy", 2, false)
	if !s.has(window, "attacker") {
		t.Fatalf("after 20 full keys: the denying key is gone (stats %+v)", s.Stats())
	}
	if st := s.Stats(); st.DenyingEvictions != 0 {
		t.Fatalf("stats %+v: a denying key was evicted", st)
	}
	// Once every key is denying, one of them must go, and is counted.
	for i := range capKeys {
		k := fmt.Sprint("denied", i)
		charge(window, k, 10)
		if d := charge(window, k, 1); d.Allowed {
			t.Fatalf("%s: %+v, want denied", k, d)
		}
	}
	if st := s.Stats(); st.DenyingEvictions == 0 {
		t.Fatalf("stats %+v: a store full of denying keys made room without evicting one", st)
	}
	// A denial that no longer holds is no reason to keep a key: once the
	// window is over, every key is idle and goes first.
	now += int64(time.Hour)
	before := s.Stats()
	charge(window, "later", 1)
	if st := s.Stats(); st.Expired != before.Expired+1 || st.Evictions != before.Evictions {
		t.Fatalf("a new key after the window: %+v (before %+v), want an idle key removed", st, before)
	}
}

// TestCountsUntilEvicted drives one small shard through many charges of
// keys that come and go and checks every answer against a model: a key
// the store holds has every charge made since it came in, and a key it
// dropped starts over.
func TestCountsUntilEvicted(t *testing.T) {
	t.Parallel()
	now := int64(1e18)
	const capKeys = 200
	s, err := New(Options{Shards: 1, MaxKeys: capKeys, SweepInterval: -1, Now: func() int64 { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := ruletest.Rule(t, floodgate.Limit{Name: "w", Algorithm: floodgate.FixedWindow, Max: 1000, Window: 1000 * time.Hour})
	counts := map[string]int64{}
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]floodgate.Decision, 1)
	for i := range 20000 {
		k := fmt.Sprintf("k%d", rng.IntN(600))
		if !s.has(r, k) {
			counts[k] = 0
		}
		counts[k]++
		if err := s.Decide(context.Background(), []limiter.Hit{{Rule: r, Key: k, Cost: 1}}, false, out); err != nil {
			t.Fatal(err)
		}
		if d := out[0]; !d.Allowed || d.Remaining != 1000-counts[k] {
			t.Fatalf("step %d, key %s: %+v, want %d remaining", i, k, d, 1000-counts[k])
		}
	}
	if st := s.Stats(); st.Keys != capKeys || st.Evictions == 0 {
		t.Fatalf("stats %+v, want the cap %d and evictions", st, capKeys)
	}
	s.checkIndex(t, &s.shards[0])
}

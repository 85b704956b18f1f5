package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// decide decides hits (a charge, or with peek a peek) and returns their
// decisions.
func decide(t testing.TB, s *memstore.Store, peek bool, hits ...limiter.Hit) []floodgate.Decision {
	t.Helper()
	out := make([]floodgate.Decision, len(hits))
	if err := s.Decide(context.Background(), hits, peek, out); err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return out
}

// charge charges hits and returns their decisions.
func charge(t testing.TB, s *memstore.Store, hits ...limiter.Hit) []floodgate.Decision {
	t.Helper()
	return decide(t, s, false, hits...)
}

// peek peeks at hits and returns their decisions.
func peek(t testing.TB, s *memstore.Store, hits ...limiter.Hit) []floodgate.Decision {
	t.Helper()
	return decide(t, s, true, hits...)
}

// clock is a settable time source for Options.Now.
type clock struct{ ns int64 }

func (c *clock) now() int64 { return c.ns }

const sec = int64(time.Second)

// windowRule counts up to max per (very long) window.
func windowRule(t testing.TB, max int64) *limiter.Rule {
	return ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.FixedWindow, Max: max, Window: 100000 * time.Hour})
}

// used returns how many units of a fixed window rule the key has used.
func used(t testing.TB, s *memstore.Store, r *limiter.Rule, key string) int64 {
	t.Helper()
	d := peek(t, s, limiter.Hit{Rule: r, Key: key, Cost: 1})[0]
	if !d.Allowed {
		return r.Limit().Max
	}
	return r.Limit().Max - d.Remaining - 1
}

// TestDenyingKeySurvivesFlood: an attacker uses up a login limit of 5 an
// hour and is denied; then a flood of distinct keys, far more than the cap,
// goes through a limit per client address and through the login limit
// itself (one attempt per name, each holding a fifth of its limit). The
// attacker's counter must survive: a sixth attempt is still denied.
func TestDenyingKeySurvivesFlood(t *testing.T) {
	t.Parallel()
	n := 1_100_000
	if testing.Short() {
		n = 200_000
	}
	for _, opts := range []memstore.Options{
		{MaxKeys: 10_000, SweepInterval: -1},
		{MaxBytes: 1 << 20, SweepInterval: -1},
	} {
		t.Run(fmt.Sprintf("keys=%d,bytes=%d", opts.MaxKeys, opts.MaxBytes), func(t *testing.T) {
			t.Parallel()
			// One instant for the whole flood: on the wall clock a flood
			// that crossed a whole hour began the attacker's next window
			// (fixed windows are aligned), which is no eviction.
			c := &clock{ns: 1000 * sec}
			opts.Now = c.now
			s := newStore(t, opts)
			login := ruletest.Rule(t, floodgate.Limit{Name: "login", Algorithm: floodgate.FixedWindow, Max: 5, Window: time.Hour})
			perIP := ruletest.Rule(t, floodgate.Limit{Name: "per-ip", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
			attacker := limiter.Hit{Rule: login, Key: "user:admin", Cost: 1}
			for i := range 6 {
				if d := charge(t, s, attacker)[0]; d.Allowed != (i < 5) {
					t.Fatalf("attempt %d: %+v", i+1, d)
				}
			}
			hits := make([]limiter.Hit, 1)
			out := make([]floodgate.Decision, 1)
			var buf []byte
			for i := range n {
				r := perIP
				if i%2 == 1 {
					r = login
				}
				buf = strconv.AppendInt(append(buf[:0], "ip:10."...), int64(i), 10)
				hits[0] = limiter.Hit{Rule: r, Key: string(buf), Cost: 1}
				if err := s.Decide(context.Background(), hits, false, out); err != nil {
					t.Fatal(err)
				}
				if !out[0].Allowed {
					t.Fatalf("flood key %d denied: %+v", i, out[0])
				}
			}
			st := s.Stats()
			if st.Evictions < uint64(n/2) {
				t.Fatalf("stats %+v: the flood of %d keys should have evicted most of them", st, n)
			}
			if d := charge(t, s, attacker)[0]; d.Allowed || d.RetryAfter <= 0 {
				t.Fatalf("the attacker after a flood of %d keys: %+v, want still denied (stats %+v)", n, d, st)
			}
			if st.DenyingEvictions != 0 {
				t.Fatalf("%d denying keys evicted, want none", st.DenyingEvictions)
			}
		})
	}
}

// TestEvictionKeepsWhatHoldsMost: in a full store, keys that hold most of
// their limits survive a flood of keys that hold less, at a scale where an
// eviction weighs only a sample of the keys.
func TestEvictionKeepsWhatHoldsMost(t *testing.T) {
	t.Parallel()
	c := &clock{ns: 1000 * sec}
	const capKeys = 10_000
	s := newStore(t, memstore.Options{Shards: 1, MaxKeys: capKeys, Now: c.now, SweepInterval: -1})
	r := windowRule(t, 10)
	rng := rand.New(rand.NewPCG(5, 6))
	heavy := map[string]bool{}
	for i, k := range rng.Perm(capKeys) {
		key := fmt.Sprint("old", k)
		cost := int64(1)
		if i%2 == 0 {
			cost = 9
			heavy[key] = true
		}
		charge(t, s, limiter.Hit{Rule: r, Key: key, Cost: cost})
	}
	for i := range capKeys {
		charge(t, s, limiter.Hit{Rule: r, Key: fmt.Sprint("new", i), Cost: 5})
	}
	if st := s.Stats(); st.Keys != capKeys || st.Evictions != capKeys {
		t.Fatalf("stats %+v, want %d keys and as many evictions", st, capKeys)
	}
	for key := range heavy {
		if got := used(t, s, r, key); got != 9 {
			t.Fatalf("key %s holding 9 of 10: %d used after the flood, want it kept", key, got)
		}
	}
}

func TestIdleExpiryAndSweep(t *testing.T) {
	t.Parallel()
	c := &clock{ns: 1000 * sec}
	s := newStore(t, memstore.Options{Now: c.now, SweepInterval: -1})
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Second, Burst: 2})
	for i := range 100 {
		charge(t, s, limiter.Hit{Rule: r, Key: fmt.Sprint(i), Cost: 2})
	}
	// A denial does not extend a key's life.
	c.ns += sec
	if d := charge(t, s, limiter.Hit{Rule: r, Key: "0", Cost: 2})[0]; d.Allowed {
		t.Fatalf("one token after 1 s: %+v, want denied", d)
	}
	s.Sweep()
	if st := s.Stats(); st.Keys != 100 || st.Expired != 0 {
		t.Fatalf("after 1 s: %+v, want 100 keys", st)
	}
	c.ns += sec // every bucket is full again
	if d := peek(t, s, limiter.Hit{Rule: r, Key: "1", Cost: 2})[0]; !d.Allowed || d.Remaining != 0 {
		t.Fatalf("idle key: %+v, want full", d)
	}
	s.Sweep()
	if st := s.Stats(); st.Keys != 0 || st.Expired != 100 {
		t.Fatalf("after 2 s: %+v, want every key swept", st)
	}
}

func TestClockClamp(t *testing.T) {
	t.Parallel()
	c := &clock{ns: 1000 * sec}
	s := newStore(t, memstore.Options{Now: c.now})
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.GCRA, Rate: 1, Per: time.Second, Burst: 1})
	h := limiter.Hit{Rule: r, Key: "k", Cost: 1}
	charge(t, s, h)
	c.ns -= 10 * sec // the clock steps back
	d := charge(t, s, h)[0]
	if d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("after a step back: %+v, want denied with the full second to wait", d)
	}
	if st := s.Stats(); st.Clamps != 1 {
		t.Fatalf("clamps %d, want 1", st.Clamps)
	}
}

func TestManyHitsAllOrNothing(t *testing.T) {
	t.Parallel()
	s := newStore(t, memstore.Options{Shards: 4})
	r := windowRule(t, 5)
	tight := windowRule(t, 1)
	var hits []limiter.Hit
	for i := range 12 { // more than fit in apply's stack buffers
		hits = append(hits, limiter.Hit{Rule: r, Key: fmt.Sprint("m", i), Cost: 1})
	}
	hits = append(hits, limiter.Hit{Rule: tight, Key: "tight", Cost: 1})
	out := charge(t, s, hits...)
	for i, d := range out {
		if !d.Allowed {
			t.Fatalf("first: hit %d denied", i)
		}
	}
	out = charge(t, s, hits...)
	if out[12].Allowed {
		t.Fatal("second: the tight limit allowed")
	}
	for i := range 12 {
		if got := used(t, s, r, hits[i].Key); got != 1 {
			t.Fatalf("key %d: %d used, want 1", i, got)
		}
	}
}

func TestDuplicateHits(t *testing.T) {
	t.Parallel()
	s := newStore(t, memstore.Options{})
	r := windowRule(t, 3)
	h := limiter.Hit{Rule: r, Key: "dup", Cost: 1}
	out := charge(t, s, h, h)
	if !out[0].Allowed || !out[1].Allowed || out[1].Remaining != 1 {
		t.Fatalf("two hits on one key: %+v, want both charged", out)
	}
	out = charge(t, s, h, h)
	if !out[0].Allowed || out[1].Allowed {
		t.Fatalf("two more on one left: %+v, want the second denied", out)
	}
	if got := used(t, s, r, "dup"); got != 2 {
		t.Fatalf("%d used, want 2 (the denied request took nothing)", got)
	}
}

func TestSlidingLogStateIsolation(t *testing.T) {
	t.Parallel()
	// The sliding log keeps its entries outside the fixed state; a denied
	// request of several hits must leave them as they were.
	c := &clock{ns: 1000 * sec}
	s := newStore(t, memstore.Options{Now: c.now})
	lg := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.SlidingLog, Max: 3, Window: time.Minute})
	tight := windowRule(t, 1)
	charge(t, s, limiter.Hit{Rule: lg, Key: "k", Cost: 1})
	charge(t, s, limiter.Hit{Rule: tight, Key: "t", Cost: 1})
	for range 3 {
		c.ns += sec
		charge(t, s, limiter.Hit{Rule: lg, Key: "k", Cost: 1}, limiter.Hit{Rule: tight, Key: "t", Cost: 1})
	}
	if d := peek(t, s, limiter.Hit{Rule: lg, Key: "k", Cost: 2})[0]; !d.Allowed || d.Remaining != 0 {
		t.Fatalf("log after denied requests: %+v, want 2 of 3 free", d)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state")
	c := &clock{ns: time.Now().UnixNano()}
	s, err := memstore.New(memstore.Options{StatePath: path, Now: c.now, SnapshotInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	w := windowRule(t, 100)
	lg := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.SlidingLog, Max: 10, Window: time.Hour})
	cc := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.Concurrency, Max: 5, LeaseTTL: time.Hour})
	for i := range 1000 {
		charge(t, s, limiter.Hit{Rule: w, Key: fmt.Sprint("w", i), Cost: int64(i%7 + 1)})
	}
	for i := range 4 {
		c.ns += sec
		charge(t, s, limiter.Hit{Rule: lg, Key: "log", Cost: 2})
		charge(t, s, limiter.Hit{Rule: cc, Key: "conc", Cost: 1, Lease: uint64(i + 1)})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Snapshots != 1 {
		t.Fatalf("stats %+v, want one snapshot (on Close)", st)
	}

	s2 := newStore(t, memstore.Options{StatePath: path, Now: c.now, SnapshotInterval: -1})
	if st := s2.Stats(); st.LoadError != nil || st.Loaded != 1002 {
		t.Fatalf("reloaded: %+v, want 1002 keys", st)
	}
	for i := range 1000 {
		if got := used(t, s2, w, fmt.Sprint("w", i)); got != int64(i%7+1) {
			t.Fatalf("key w%d: %d used after reload, want %d", i, got, i%7+1)
		}
	}
	if d := peek(t, s2, limiter.Hit{Rule: lg, Key: "log", Cost: 2})[0]; !d.Allowed || d.Remaining != 0 {
		t.Fatalf("log after reload: %+v, want 8 used", d)
	}
	// Lease 2 is still held: releasing it frees a unit.
	if err := s2.Release(context.Background(), []limiter.Hit{{Rule: cc, Key: "conc", Cost: 1, Lease: 2}}); err != nil {
		t.Fatal(err)
	}
	if d := peek(t, s2, limiter.Hit{Rule: cc, Key: "conc", Cost: 1, Lease: 99})[0]; !d.Allowed || d.Remaining != 1 {
		t.Fatalf("after a release after reload: %+v, want 2 free", d)
	}
}

func TestCorruptStateFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	s, err := memstore.New(memstore.Options{StatePath: good, SnapshotInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	r := windowRule(t, 10)
	for i := range 50 {
		charge(t, s, limiter.Hit{Rule: r, Key: fmt.Sprint(i), Cost: 1})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)-3] ^= 0x40
	badVersion := append([]byte(nil), data...)
	badVersion[8] = 9
	// The instant the snapshot was taken, which the body's checksum does
	// not cover.
	badTaken := append([]byte(nil), data...)
	badTaken[45] ^= 0x01
	for name, content := range map[string][]byte{
		"empty":     {},
		"short":     data[:10],
		"truncated": data[:len(data)-5],
		"appended":  append(append([]byte(nil), data...), 0),
		"flipped":   flipped,
		"version":   badVersion,
		"taken":     badTaken,
		"foreign":   []byte("{\"this is\": \"some other program's file\"}\n"),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			s := newStore(t, memstore.Options{StatePath: path, SnapshotInterval: -1})
			st := s.Stats()
			if st.LoadError == nil || st.Loaded != 0 || st.Keys != 0 {
				t.Fatalf("stats %+v, want a load error and nothing loaded", st)
			}
			if got := used(t, s, r, "1"); got != 0 {
				t.Fatalf("key 1 used %d, want a fresh key", got)
			}
		})
	}
	// A temporary file left by a snapshot cut short is removed.
	stale := good + ".tmp12345"
	if err := os.WriteFile(stale, data[:20], 0o600); err != nil {
		t.Fatal(err)
	}
	// The good file itself loads.
	s2 := newStore(t, memstore.Options{StatePath: good, SnapshotInterval: -1})
	if st := s2.Stats(); st.LoadError != nil || st.Loaded != 50 {
		t.Fatalf("good file: %+v", st)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale temporary file still there: %v", err)
	}
}

func TestSnapshotError(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "missing-dir", "state")
	s, err := memstore.New(memstore.Options{StatePath: path, SnapshotInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Snapshot(); err == nil {
		t.Fatal("snapshot into a missing directory: no error")
	}
	if err := s.Close(); err == nil {
		t.Fatal("Close: no error from its snapshot")
	}
	if st := s.Stats(); st.SnapshotErrors != 2 || st.LastSnapshotError == nil {
		t.Fatalf("stats %+v, want 2 snapshot errors", st)
	}
}

// TestPeriodicSnapshot runs the store in a synctest bubble, so its
// snapshot ticker follows a fake clock: a change is written at the next
// tick, and an idle store writes nothing.
func TestPeriodicSnapshot(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const interval = 10 * time.Millisecond
		path := filepath.Join(t.TempDir(), "state")
		s := newStore(t, memstore.Options{StatePath: path, SnapshotInterval: interval})
		r := windowRule(t, 5)
		// snapshots lets the store's goroutines finish what they do at the
		// current instant, then counts the snapshots written.
		snapshots := func() uint64 {
			synctest.Wait()
			return s.Stats().Snapshots
		}
		start := time.Now()
		charge(t, s, limiter.Hit{Rule: r, Key: "k", Cost: 1})
		time.Sleep(interval - time.Nanosecond)
		if n := snapshots(); n != 0 {
			t.Fatalf("%d snapshots before the first tick", n)
		}
		time.Sleep(time.Nanosecond)
		if n := snapshots(); n != 1 {
			t.Fatalf("%d snapshots at the first tick, want 1", n)
		}
		if st := s.Stats(); !st.LastSnapshot.Equal(start.Add(interval)) {
			t.Fatalf("the snapshot began %v after the start, want at the first tick (%v)", st.LastSnapshot.Sub(start), interval)
		}
		if _, err := os.Stat(path); err != nil {
			t.Fatal(err)
		}
		// Nothing changes: ten more ticks write nothing.
		time.Sleep(10 * interval)
		if n := snapshots(); n != 1 {
			t.Fatalf("%d snapshots of an idle store after ten more ticks, want still 1", n)
		}
		// A change between two ticks is written at the next one.
		time.Sleep(interval / 2)
		charge(t, s, limiter.Hit{Rule: r, Key: "k", Cost: 1})
		if n := snapshots(); n != 1 {
			t.Fatalf("%d snapshots right after the change, want still 1", n)
		}
		time.Sleep(interval / 2)
		if n := snapshots(); n != 2 {
			t.Fatalf("%d snapshots at the tick after the change, want 2", n)
		}
	})
}

// TestPeriodicSweep runs the store with its default clock in a synctest
// bubble: idle keys stay until the sweep ticker fires, and then go.
func TestPeriodicSweep(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const sweep = 10 * time.Second
		s := newStore(t, memstore.Options{SweepInterval: sweep})
		r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Second, Burst: 2})
		for i := range 100 {
			charge(t, s, limiter.Hit{Rule: r, Key: fmt.Sprint(i), Cost: 2})
		}
		// Every bucket is full again after 2 s, but only a sweep (or a
		// touch) removes a key.
		time.Sleep(sweep - time.Nanosecond)
		synctest.Wait()
		if st := s.Stats(); st.Keys != 100 || st.Expired != 0 {
			t.Fatalf("before the first sweep: %+v, want 100 keys", st)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if st := s.Stats(); st.Keys != 0 || st.Expired != 100 {
			t.Fatalf("after the first sweep: %+v, want every key swept", st)
		}
	})
}

func TestFloodStaysUnderCap(t *testing.T) {
	t.Parallel()
	const capKeys = 10000
	n := 1_000_000
	if testing.Short() {
		n = 200_000
	}
	s := newStore(t, memstore.Options{MaxKeys: capKeys, SweepInterval: -1})
	r := windowRule(t, 10)
	rng := rand.New(rand.NewPCG(3, 4))
	hits := make([]limiter.Hit, 1)
	out := make([]floodgate.Decision, 1)
	var buf []byte
	for i := range n {
		buf = strconv.AppendUint(buf[:0], rng.Uint64(), 36)
		hits[0] = limiter.Hit{Rule: r, Key: string(buf), Cost: 1}
		if err := s.Decide(context.Background(), hits, false, out); err != nil {
			t.Fatal(err)
		}
		if i%100000 == 0 {
			if k := s.Stats().Keys; k > capKeys {
				t.Fatalf("after %d keys: %d held, more than the cap %d", i, k, capKeys)
			}
		}
	}
	st := s.Stats()
	if st.Keys > capKeys || st.Evictions < uint64(n-capKeys) {
		t.Fatalf("after %d random keys: %+v, want at most %d keys and the rest evicted", n, st, capKeys)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	s := newStore(t, memstore.Options{})
	r := windowRule(t, 5)
	ctx := context.Background()
	if err := s.Decide(ctx, []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}, false, nil); err == nil {
		t.Fatal("short out slice: no error")
	}
	if err := s.Decide(ctx, []limiter.Hit{{Key: "k", Cost: 1}}, false, make([]floodgate.Decision, 1)); err == nil {
		t.Fatal("nil rule: no error")
	}
	if _, err := memstore.New(memstore.Options{MaxKeys: -1}); err == nil {
		t.Fatal("negative MaxKeys: no error")
	}
	if _, err := memstore.New(memstore.Options{Shards: -3}); err == nil {
		t.Fatal("negative Shards: no error")
	}
	err := s.Decide(ctx, []limiter.Hit{{Rule: r, Key: "k", Cost: 6}}, false, make([]floodgate.Decision, 1))
	if !errors.Is(err, floodgate.ErrNeverFits) {
		t.Fatalf("cost 6 of 5: %v", err)
	}
}

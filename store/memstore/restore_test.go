package memstore

import (
	"context"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestStateFileNegativeCounts restores state files whose checksums hold
// but whose records carry counts no decision writes: a negative count of
// a fixed window, a quota and a token bucket's fraction, a negative sum of
// a sliding log and of a concurrency limit, entries that do not add up to
// their sum, an entry of no units and a head past the entries. Decisions
// trust their states, so such a record let every request through with
// more units remaining than the limit has. The file is refused whole, as
// an altered file is, and the limits hold; the states the store writes of
// every algorithm, sliding logs with dropped entries included, still load.
func TestStateFileNegativeCounts(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC).UnixNano()
	hour := int64(time.Hour)
	noBoot := func() (string, time.Duration, bool) { return "", 0, false }
	rules := map[string]*limiter.Rule{
		"fixed":       ruletest.Rule(t, floodgate.Limit{Name: "fixed", Algorithm: floodgate.FixedWindow, Max: 5, Window: time.Hour}),
		"log":         ruletest.Rule(t, floodgate.Limit{Name: "log", Algorithm: floodgate.SlidingLog, Max: 5, Window: time.Hour}),
		"concurrency": ruletest.Rule(t, floodgate.Limit{Name: "concurrency", Algorithm: floodgate.Concurrency, Max: 5, LeaseTTL: time.Hour}),
		"quota":       ruletest.Rule(t, floodgate.Limit{Name: "quota", Algorithm: floodgate.Quota, Max: 5, Period: floodgate.Day}),
		"bucket":      ruletest.Rule(t, floodgate.Limit{Name: "bucket", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour, Burst: 5}),
	}
	lease := func(w int64) algo.Entry { return algo.Entry{At: now + hour, Weight: w, ID: 1} }
	arrival := func(w int64) algo.Entry { return algo.Entry{At: now - 1, Weight: w} }
	for _, c := range []struct {
		name, rule string
		st         algo.State
	}{
		{"fixed window count", "fixed", algo.State{Last: now - 1, A: now / hour, B: -1 << 60}},
		{"quota count", "quota", algo.State{Last: now - 1, A: -1 << 60, B: now - hour, C: now + hour}},
		{"bucket fraction", "bucket", algo.State{Last: now - 1, A: now + hour, B: -1}},
		{"log sum", "log", algo.State{Last: now - 1, A: -1 << 60, Ext: &algo.Ext{Entries: []algo.Entry{arrival(-1 << 60)}}}},
		{"log sum below entries", "log", algo.State{Last: now - 1, A: 0, Ext: &algo.Ext{Entries: []algo.Entry{arrival(5)}}}},
		{"log entry of no units", "log", algo.State{Last: now - 1, A: 0, Ext: &algo.Ext{Entries: []algo.Entry{arrival(0)}}}},
		{"log head past entries", "log", algo.State{Last: now - 1, A: 0, C: 2, Ext: &algo.Ext{Entries: []algo.Entry{arrival(5)}}}},
		{"concurrency sum", "concurrency", algo.State{Last: now - 1, A: -1 << 60, B: 1, Ext: &algo.Ext{Entries: []algo.Entry{lease(-1 << 60)}}}},
		{"concurrency entry weights overflow", "concurrency", algo.State{Last: now - 1, A: 1, B: 1, Ext: &algo.Ext{Entries: []algo.Entry{lease(math.MaxInt64), lease(2)}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := rules[c.rule]
			body := appendRecord(nil, &entry{rule: r, key: "k", exp: now + hour, st: c.st})
			body = appendRecord(body, &entry{rule: r, key: "other", exp: now + hour, st: algo.State{Last: now - 1}})
			file := appendHeader(nil, header{taken: now, wall: now}, crc32.Checksum(body, castagnoli), uint64(len(body)), 2)
			path := filepath.Join(t.TempDir(), "state")
			if err := os.WriteFile(path, append(file, body...), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := New(Options{StatePath: path, SnapshotInterval: -1, SweepInterval: -1, Now: func() int64 { return now }, Boot: noBoot})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if st := s.Stats(); st.LoadError == nil || st.Loaded != 0 {
				t.Errorf("stats %+v, want the file refused and nothing loaded", st)
			}
			allowed := 0
			out := make([]floodgate.Decision, 1)
			for i := range 50 {
				if err := s.Decide(context.Background(), []limiter.Hit{{Rule: r, Key: "k", Cost: 1, Lease: uint64(i + 10)}}, false, out); err != nil {
					t.Fatal(err)
				}
				if d := out[0]; d.Remaining > 5 {
					t.Fatalf("request %d: %+v, more units remaining than the limit of 5", i+1, d)
				}
				if out[0].Allowed {
					allowed++
				}
			}
			if allowed > 5 {
				t.Fatalf("%d of 50 requests allowed against a limit of 5", allowed)
			}
		})
	}
	t.Run("the store's own states", func(t *testing.T) {
		t.Parallel()
		clock := now
		path := filepath.Join(t.TempDir(), "state")
		opts := Options{StatePath: path, SnapshotInterval: -1, SweepInterval: -1, Now: func() int64 { return clock }, Boot: noBoot}
		s, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		out := make([]floodgate.Decision, 1)
		for i := range 5 {
			for _, r := range rules {
				if err := s.Decide(ctx, []limiter.Hit{{Rule: r, Key: "k", Cost: 1, Lease: uint64(i + 1)}}, false, out); err != nil {
					t.Fatal(err)
				}
			}
			clock += 20 * int64(time.Minute) // log entries leave the window, leases expire
		}
		if err := s.Release(ctx, []limiter.Hit{{Rule: rules["concurrency"], Key: "k", Lease: 5}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		want := s.Stats().Keys
		s2, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		if st := s2.Stats(); st.LoadError != nil || st.Loaded != want {
			t.Fatalf("stats %+v, want the %d keys loaded", st, want)
		}
	})
}

// TestStateFileBeyondTheTimeline restores a state file taken, by its
// header, a minute before the end of the int64 range of instants (a
// clock set to the year 2262, or an altered file), and one whose only
// record was last decided then. The store's timeline would continue from
// there, overflow, and every decision of a limit whose span reaches past
// it fail, so that the limit fell to its failure policy (here open) for
// as long as the store ran. Such a file is refused; the limits hold.
func TestStateFileBeyondTheTimeline(t *testing.T) {
	t.Parallel()
	end := int64(math.MaxInt64 - time.Minute)
	now := time.Now().UnixNano()
	noBoot := func() (string, time.Duration, bool) { return "", 0, false }
	r := ruletest.Rule(t, floodgate.Limit{Name: "slots", Algorithm: floodgate.Concurrency, Max: 5, LeaseTTL: time.Hour})
	for name, c := range map[string]struct {
		taken int64
		st    algo.State
	}{
		"taken": {end, algo.State{}},
		"state": {now, algo.State{Last: end, A: 1, B: 1, Ext: &algo.Ext{Entries: []algo.Entry{{At: end, Weight: 1, ID: 1}}}}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var body []byte
			count := uint64(0)
			if c.st.Last != 0 {
				body = appendRecord(nil, &entry{rule: r, key: "k", exp: math.MaxInt64, st: c.st})
				count = 1
			}
			file := appendHeader(nil, header{taken: c.taken, wall: c.taken}, crc32.Checksum(body, castagnoli), uint64(len(body)), count)
			path := filepath.Join(t.TempDir(), "state")
			if err := os.WriteFile(path, append(file, body...), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := New(Options{StatePath: path, SnapshotInterval: -1, SweepInterval: -1, Boot: noBoot})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if st := s.Stats(); st.LoadError == nil || st.Loaded != 0 || st.Rebased != 0 {
				t.Errorf("stats %+v, want the file refused and the timeline left alone", st)
			}
			l := limiter.New(s, limiter.Options{})
			allowed := 0
			for i := range 20 {
				res, err := l.Check(context.Background(), []limiter.Hit{{Rule: r, Key: "k", Cost: 1, Lease: uint64(i + 10)}})
				if err != nil {
					t.Fatal(err)
				}
				if res.Degraded != limiter.NotDegraded {
					t.Fatalf("request %d decided by the failure policy: %+v", i+1, res)
				}
				if res.Allowed {
					allowed++
				}
			}
			if allowed != 5 {
				t.Fatalf("%d of 20 requests allowed by a limit of 5 slots", allowed)
			}
		})
	}
}

package memstore_test

import (
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// machine is a fake machine's clocks: the wall clock, the monotonic clock
// of the process running now, and the boot clock.
type machine struct {
	wall, mono, up atomic.Int64
	boot           atomic.Pointer[string]
}

// advance moves every clock by d, as time going by does.
func (m *machine) advance(d time.Duration) {
	m.wall.Add(int64(d))
	m.mono.Add(int64(d))
	m.up.Add(int64(d))
}

// store starts a process on the machine: its monotonic clock starts at 0.
func (m *machine) store(t *testing.T, path string) *memstore.Store {
	t.Helper()
	m.mono.Store(0)
	s, err := memstore.New(memstore.Options{
		StatePath: path, SnapshotInterval: -1, SweepInterval: -1,
		Now:     func() int64 { return m.wall.Load() },
		Elapsed: func() time.Duration { return time.Duration(m.mono.Load()) },
		Boot: func() (string, time.Duration, bool) {
			if id := m.boot.Load(); id != nil {
				return *id, time.Duration(m.up.Load()), true
			}
			return "", 0, false
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// allowed charges r for key n times and returns how many passed, and the
// last denial.
func allowed(t *testing.T, s *memstore.Store, r *limiter.Rule, key string, n int) (int, floodgate.Decision) {
	t.Helper()
	got := 0
	var denial floodgate.Decision
	for range n {
		d := charge(t, s, limiter.Hit{Rule: r, Key: key, Cost: 1})[0]
		if d.Allowed {
			got++
		} else {
			denial = d
		}
	}
	return got, denial
}

// TestStateAcrossAClockError takes a snapshot while the wall clock is an
// hour off and restarts the store 11 seconds later with the right clock,
// on the same boot or after a reboot. A state from the future is re-based,
// never trusted: no limit freezes, and the counts of a login limit of 5
// an hour survive. On the same boot the boot clock tells the time that
// really went by, either way; after a reboot only the wall clock can, and
// a snapshot it dates an hour back is an hour old.
func TestStateAcrossAClockError(t *testing.T) {
	t.Parallel()
	truth := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC) // on the hour: no window ends in the test
	for _, tc := range []struct {
		name     string
		err      time.Duration // how far off the wall clock is at the snapshot
		sameBoot bool
		rebased  time.Duration
		// After the restart: tokens the bucket has, whether the login
		// limit still denies, tokens after 4 more seconds.
		tokens, later int
		denies        bool
	}{
		// 1 s after the bucket was emptied, 11 s away: 12 tokens, 5 fit.
		{name: "fast/same boot", err: time.Hour, sameBoot: true, rebased: time.Hour, tokens: 5, denies: true, later: 4},
		// The time away is unknown: as if none, and the bucket has the
		// one token it had; it refills from there.
		{name: "fast/reboot", err: time.Hour, rebased: time.Hour - 11*time.Second, tokens: 1, denies: true, later: 4},
		{name: "slow/same boot", err: -time.Hour, sameBoot: true, rebased: -time.Hour, tokens: 5, denies: true, later: 4},
		// The wall clock says the snapshot is an hour and 12 s old: the
		// hour's window is over, as after a downtime that long.
		{name: "slow/reboot", err: -time.Hour, tokens: 5, denies: false, later: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "state")
			bucket := ruletest.Rule(t, floodgate.Limit{Name: "bucket", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Second, Burst: 5})
			login := ruletest.Rule(t, floodgate.Limit{Name: "login", Algorithm: floodgate.FixedWindow, Max: 5, Window: time.Hour})
			var m machine
			first := "boot-1"
			m.boot.Store(&first)
			m.up.Store(int64(1000 * time.Second))
			m.wall.Store(truth.Add(tc.err).UnixNano())
			s := m.store(t, path)
			if n, _ := allowed(t, s, bucket, "k", 6); n != 5 {
				t.Fatalf("fresh bucket: %d of 6 allowed, want 5", n)
			}
			if n, _ := allowed(t, s, login, "attacker", 6); n != 5 {
				t.Fatalf("login: %d of 6 allowed, want 5", n)
			}
			m.advance(time.Second)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}

			// 11 s later, with the right clock.
			m.advance(11 * time.Second)
			m.wall.Add(-int64(tc.err))
			if !tc.sameBoot {
				second := "boot-2"
				m.boot.Store(&second)
				m.up.Store(int64(30 * time.Second))
			}
			s2 := m.store(t, path)
			defer s2.Close()
			st := s2.Stats()
			if st.LoadError != nil || st.Rebased != tc.rebased {
				t.Fatalf("after the restart: %+v, want the state loaded and the timeline moved by %v", st, tc.rebased)
			}
			n, denial := allowed(t, s2, bucket, "k", 6)
			if n != tc.tokens {
				t.Errorf("bucket after the restart: %d of 6 allowed, want %d", n, tc.tokens)
			}
			if n < 6 && denial.RetryAfter <= 0 {
				t.Errorf("bucket denial %+v: want a RetryAfter", denial)
			}
			d := charge(t, s2, limiter.Hit{Rule: login, Key: "attacker", Cost: 1})[0]
			if d.Allowed == tc.denies || (!d.Allowed && (d.RetryAfter <= 0 || d.RetryAfter > time.Hour)) {
				t.Errorf("login after the restart: %+v, want denied %v, for at most the hour", d, tc.denies)
			}
			if want := m.wall.Load(); d.At != want {
				t.Errorf("decision at %v, want the wall clock's %v", time.Unix(0, d.At).UTC(), time.Unix(0, want).UTC())
			}
			m.advance(4 * time.Second)
			if n, _ := allowed(t, s2, bucket, "k", 6); n != tc.later {
				t.Errorf("bucket 4 s after the restart: %d of 6 allowed, want %d (frozen?)", n, tc.later)
			}
			if c := s2.Stats().Clamps; c != 0 {
				t.Errorf("%d decisions clamped to a state from the future", c)
			}
		})
	}
}

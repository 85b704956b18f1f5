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

// TestSentinel reaches the primary through a real sentinel.
func TestSentinel(t *testing.T) {
	primary := redistest.Start(t)
	sen := redistest.StartSentinel(t, primary, "fgmaster")
	s, err := New(Options{URL: "redis+sentinel://" + sen.Addr + "/fgmaster", Prefix: uniquePrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := ruletest.Rule(t, floodgate.Limit{Name: "sentinel", Algorithm: floodgate.FixedWindow, Max: 2, Window: time.Hour})
	hits := []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}
	out := make([]floodgate.Decision, 1)
	for i, want := range []bool{true, true, false} {
		if err := s.Decide(context.Background(), hits, false, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed != want {
			t.Fatalf("request %d: %+v, want allowed=%v", i+1, out[0], want)
		}
	}
	// The counter is on the primary itself.
	if v, err := primary.Do("EXISTS", s.Key(r, "k")); err != nil || v != "1" {
		t.Fatalf("key on the primary: %q, %v", v, err)
	}
	// Only the connections to the primary tell Redis' progress: the
	// sentinels' (whose pings and events say nothing of it) do not.
	s.replies.all.mu.Lock()
	defer s.replies.all.mu.Unlock()
	if len(s.replies.all.conns) == 0 {
		t.Fatal("no connection to the primary tracked")
	}
	for c := range s.replies.all.conns {
		if got := c.RemoteAddr().String(); got != primary.Addr {
			t.Fatalf("a tracked connection goes to %s, want only the primary %s (sentinel %s)", got, primary.Addr, sen.Addr)
		}
	}
}

package redisstore

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestRulesGoWithTheirArgs: a rule's script arguments live on the rule, so
// a rule dropped (a policy reload) is freed with them; before, a cache
// keyed by rule held up to 4,096 of them.
func TestRulesGoWithTheirArgs(t *testing.T) {
	s := newStandalone(t)
	ctx := context.Background()
	var ws []weak.Pointer[limiter.Rule]
	for i := range 50 {
		r := ruletest.Rule(t, floodgate.Limit{Name: "args", Algorithm: floodgate.FixedWindow, Max: int64(i + 1), Window: 1000 * time.Hour})
		out := make([]floodgate.Decision, 1)
		if err := s.Decide(ctx, []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}, true, out); err != nil || !out[0].Allowed {
			t.Fatalf("rule %d: %+v %v", i, out[0], err)
		}
		ws = append(ws, weak.Make(r))
	}
	for range 10 {
		runtime.GC()
	}
	for i, w := range ws {
		if w.Value() != nil {
			t.Fatalf("rule %d is still held after it was dropped", i)
		}
	}
}

package dashboard

import (
	"runtime"
	"testing"
	"weak"

	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestRulesGoWithTheirSeries: a rule finds its series on itself, so a
// rule dropped by a reload is freed; before, a map by rule held up to
// 4×MaxSeries of them. A second Recorder counts the rule into its own
// series.
func TestRulesGoWithTheirSeries(t *testing.T) {
	t.Parallel()
	rec := NewRecorder(1000)
	var ws []weak.Pointer[limiter.Rule]
	for range 50 {
		r := ruletest.Rule(t, bucket("a"))
		decide(rec, []*limiter.Rule{r}, "ip:1", false)
		ws = append(ws, weak.Make(r))
	}
	kept := ruletest.Rule(t, bucket("a"))
	decide(rec, []*limiter.Rule{kept}, "ip:1", false)
	rec2 := NewRecorder(1000)
	decide(rec2, []*limiter.Rule{kept}, "ip:1", false)
	for range 10 {
		runtime.GC()
	}
	for i, w := range ws {
		if w.Value() != nil {
			t.Fatalf("rule %d is still held after it was dropped", i)
		}
	}
	if got := rec.Counts(999, 1000)["a"]; len(got) != 1 || got[0].Decisions != 51 {
		t.Fatalf("counts %v, want 51 decisions", got)
	}
	if got := rec2.Counts(999, 1000)["a"]; len(got) != 1 || got[0].Decisions != 1 {
		t.Fatalf("the second recorder: %v, want 1 decision", got)
	}
}

package fields

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
)

// TestResetContinuousAtWholeSecond: 3 units per 10 s (an interval of
// 3.333… s), burst 5, emptied at 0 and asked again at 8 s: 2 units are
// back and the third arrives at exactly 10 s, 2 s later. The RateLimit t
// is 2, not 3, and a denied cost of 3 (which passes at exactly 2 s) gets
// Retry-After 2: the header never points past the instant the request fits.
func TestResetContinuousAtWholeSecond(t *testing.T) {
	t.Parallel()
	l := floodgate.Limit{Name: "b", Algorithm: floodgate.TokenBucket, Rate: 3, Per: 10 * time.Second, Burst: 5}
	p, err := algo.Compile(&l)
	if err != nil {
		t.Fatal(err)
	}
	h := NewLimit(&l)
	var s algo.State
	if d, err := p.Decide(&s, algo.Request{Now: 0, Cost: 5}); err != nil || !d.Allowed {
		t.Fatalf("emptying: %+v %v", d, err)
	}
	now := int64(8 * time.Second)
	d, err := p.Decide(&s, algo.Request{Now: now, Cost: 3})
	if err != nil || d.Allowed || d.Remaining != 2 || d.RetryAfter != 2*time.Second {
		t.Fatalf("cost 3 at 8s: %+v %v, want a denial with 2 left for 2s", d, err)
	}
	if got, ok := h.Reset(&d); !ok || got != 2 {
		t.Errorf("t = %d (ok %v), want 2: one more unit than 2 arrives at exactly 10s", got, ok)
	}
	var rd Renderer
	fs := rd.Render(nil, []Item{{Limit: h, Decision: d}}, 0, true, d.RetryAfter, nil)
	for _, f := range fs {
		if f.Name == NameRetryAfter && f.Value != "2" {
			t.Errorf("Retry-After: %s, want 2 (the cost of 3 passes at exactly 2s); fields %v", f.Value, fs)
		}
	}
}

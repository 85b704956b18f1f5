package loadgen

import (
	"context"
	"testing"
	"time"
)

// TestCallerDeadline: every decision gets a deadline between 0.9 and 1
// times --timeout from its start, and a context is shared only within a
// tenth of it.
func TestCallerDeadline(t *testing.T) {
	dl := callerDeadline{parent: context.Background(), d: time.Second}
	defer dl.stop()
	start := time.Unix(1_700_000_000, 0)
	var prev context.Context
	renewed := 0
	for step := time.Duration(0); step <= 3*time.Second; step += 7 * time.Millisecond {
		t0 := start.Add(step)
		ctx := dl.at(t0)
		d, ok := ctx.Deadline()
		if !ok {
			t.Fatalf("at %v: no deadline", step)
		}
		if left := d.Sub(t0); left < 900*time.Millisecond || left > time.Second {
			t.Fatalf("at %v: deadline %v after the start, want 0.9 s to 1 s", step, left)
		}
		if ctx != prev {
			renewed++
			if prev != nil && prev.Err() == nil {
				t.Fatalf("at %v: the context given up is still live", step)
			}
			prev = ctx
		}
	}
	if renewed < 27 || renewed > 31 {
		t.Fatalf("%d contexts over 3 s, want about one every 100 ms", renewed)
	}
}

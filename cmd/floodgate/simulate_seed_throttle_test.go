package main

import "testing"

// TestSimulateSeedLesson07Throttle is seed 003's throttle demo through the
// command: 8 at once against 5 a second with a burst of 5, then 6 one
// second later (200×5 429×3, then 200×5 429), and the partner-basic plan
// (2 a second, burst 2) with 4 at once (200 200 429 429).
func TestSimulateSeedLesson07Throttle(t *testing.T) {
	t.Parallel()
	check := func(res simJSON, want []bool) {
		t.Helper()
		if len(res.Decisions) != len(want) {
			t.Fatalf("%d decisions, want %d", len(res.Decisions), len(want))
		}
		for i, d := range res.Decisions {
			if d.Allowed != want[i] {
				t.Errorf("decision %d at %v: allowed %v, want %v", i, d.At, d.Allowed, want[i])
			}
		}
	}
	check(simulateJSON(t, "--algorithm", "token_bucket", "--rate", "5", "--burst", "5", "--arrivals", "0*8,1*6"),
		[]bool{true, true, true, true, true, false, false, false, true, true, true, true, true, false})
	check(simulateJSON(t, "--algorithm", "token_bucket", "--rate", "2", "--burst", "2", "--arrivals", "0*4"),
		[]bool{true, true, false, false})
}

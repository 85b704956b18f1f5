package dashboard

import (
	"testing"
	"time"
)

// TestOverloadPoints: the routes' overload control is kept per second,
// the last sample of a second wins, seconds without one are left out, and
// the hour's ring forgets what is older.
func TestOverloadPoints(t *testing.T) {
	r := NewRecorder(1000)
	r.RecordOverload("api", 64, 0)
	r.RecordOverload("api", 32, 5*time.Millisecond)
	r.Tick(1002)
	r.RecordOverload("api", 16, 9*time.Millisecond)
	got := r.OverloadPoints(999, 1002)["api"]
	want := []OverloadPoint{{T: 1000, Limit: 32, Ms: 5}, {T: 1002, Limit: 16, Ms: 9}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("points %v, want %v", got, want)
	}
	r.Tick(1002 + Window)
	if pts := r.OverloadPoints(1002, 1002+Window); len(pts) != 0 {
		t.Errorf("points after an hour: %v", pts)
	}
}

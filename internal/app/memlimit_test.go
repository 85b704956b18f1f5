package app

import (
	"math"
	"testing"
)

// TestSoftMemoryLimit: the limit is the cap and a tenth of it, plus what
// is live outside the store and GOGC's room for it, at least the floor.
func TestSoftMemoryLimit(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name                                   string
		capBytes, held, live, stackGlobals, gc int64
		want                                   int64
	}{
		{"empty process: the floor", 64 * mib, 0, 2 * mib, mib, 100, 64*mib + 64*mib/10 + SoftLimitFloor},
		{"a full store is not counted twice", 64 * mib, 64 * mib, 60 * mib, mib, 100, 64*mib + 64*mib/10 + SoftLimitFloor},
		{"the rest of the process and GOGC's room", 64 * mib, 32 * mib, 132 * mib, 4 * mib, 100, 64*mib + 64*mib/10 + 208*mib},
		{"GOGC=50", 64 * mib, 32 * mib, 132 * mib, 4 * mib, 50, 64*mib + 64*mib/10 + 156*mib},
		{"GOGC=off gives the rest the default's room", 64 * mib, 32 * mib, 132 * mib, 4 * mib, -1, 64*mib + 64*mib/10 + 208*mib},
		{"no overflow", math.MaxInt64 / 2, 0, math.MaxInt64 / 2, 0, 100, math.MaxInt64},
	} {
		if got := softMemoryLimit(c.capBytes, c.held, c.live, c.stackGlobals, c.gc); got != c.want {
			t.Errorf("%s: softMemoryLimit = %d, want %d", c.name, got, c.want)
		}
	}
}

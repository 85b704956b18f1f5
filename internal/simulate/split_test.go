package simulate

import "testing"

// TestWronglyDenied holds seed 002's wrongly_denied to its definition.
func TestWronglyDenied(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		global int64
		counts []int64
		want   int64
	}{
		// 100 over 4 instances = 25 each; 40+10+10+10 = 70 ≤ 100, the
		// busy instance denies 15 that the global limit would allow.
		{100, []int64{40, 10, 10, 10}, 15},
		{100, []int64{25, 25, 25, 25}, 0},
		{100, []int64{30, 30, 30, 10}, 15},
		// Over the global limit: nothing is wrongly denied.
		{100, []int64{60, 60}, 0},
		// 10 // 3 = 3 each.
		{10, []int64{10, 0, 0}, 7},
		{10, []int64{4, 4, 2}, 2},
		{10, nil, 0},
		{10, []int64{-3, 5}, 0},
	} {
		if got := wronglyDenied(c.global, c.counts); got != c.want {
			t.Errorf("wronglyDenied(%d, %v) = %d, want %d", c.global, c.counts, got, c.want)
		}
	}
}

package rls

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestStatsRefuseANearLimitRatioThatIsNotANumber: StatsOptions'
// NearLimitRatio must be between 0 and 1; NaN is not, and is refused as
// a ratio of 2 is, instead of making every hit a near_limit one.
func TestStatsRefuseANearLimitRatioThatIsNotANumber(t *testing.T) {
	for _, r := range []float64{math.NaN(), 2, -1} {
		if _, err := NewStats(prometheus.NewRegistry(), StatsOptions{NearLimitRatio: r}); err == nil {
			t.Errorf("NearLimitRatio %v accepted", r)
		}
	}
}

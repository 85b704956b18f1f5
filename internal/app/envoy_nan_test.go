package app

import (
	"strings"
	"testing"
)

// TestRLSEnvRefusesARatioThatIsNotANumber: NEAR_LIMIT_RATIO must be a
// number in (0, 1]. NaN is none, yet it passed both comparisons of the
// check (every comparison with NaN is false), and the near-limit
// threshold it gave (the floor of a limit times NaN, as a whole number)
// counted every hit of every descriptor as near_limit.
func TestRLSEnvRefusesARatioThatIsNotANumber(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"NaN", "nan", "+NaN"} {
		_, _, err := readRLSEnv(envOf(map[string]string{"NEAR_LIMIT_RATIO": v}))
		if err == nil || !strings.Contains(err.Error(), "NEAR_LIMIT_RATIO") {
			t.Errorf("NEAR_LIMIT_RATIO=%s: %v, want it refused, naming the variable", v, err)
		}
	}
}

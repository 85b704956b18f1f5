//go:build !race

package limiter_test

// raceEnabled reports whether the test binary runs under the race
// detector.
const raceEnabled = false

//go:build race

package limiter_test

// raceEnabled reports whether the test binary runs under the race
// detector, which makes sync.Pool drop items at random (allocations are
// then not counted).
const raceEnabled = true

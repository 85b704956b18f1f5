//go:build !race

package gateway

// raceEnabled reports whether the test binary runs under the race
// detector.
const raceEnabled = false

//go:build !race

package edge

// raceEnabled reports whether the test binary runs under the race
// detector.
const raceEnabled = false

//go:build race

package app

// raceEnabled reports whether the test binary runs under the race
// detector, which maps shadow memory beside what the process touches.
const raceEnabled = true

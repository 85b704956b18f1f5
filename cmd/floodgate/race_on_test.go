//go:build race

package main

// raceDetector reports whether the test binary runs under the race
// detector, whose shadow memory no Go memory limit covers.
const raceDetector = true

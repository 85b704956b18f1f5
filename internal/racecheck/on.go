//go:build race

package racecheck

// Enabled reports whether the binary runs under the race detector.
const Enabled = true

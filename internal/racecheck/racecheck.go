// Package racecheck tells a test whether its binary runs under the race
// detector, which makes sync.Pool drop items at random (allocations are
// then not counted) and maps shadow memory beside what the process
// touches (resident memory is then not the program's own): the tests of
// allocations and of memory skip under it, and scripts/test.sh runs them
// without it.
package racecheck

// Package waittest helps tests of calls that must not block: Returns runs
// a call and fails the test when it has not returned after a generous
// wait, which only a call that blocks (on a named pipe, a lock, a peer
// that never answers) takes. It makes no claim about speed.
package waittest

import (
	"testing"
	"time"
)

// Wait is how long Returns waits: far longer than any call that does not
// block takes on a loaded machine.
const Wait = time.Minute

// Returns runs f on a goroutine and returns what it returns, or fails the
// test (what names the call) when f has not returned within Wait.
func Returns[T any](t testing.TB, what string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(Wait):
		t.Fatalf("%s did not return within %v", what, Wait)
	}
	var zero T
	return zero
}

package waittest

import (
	"errors"
	"testing"
)

func TestReturnsWhatTheCallReturns(t *testing.T) {
	want := errors.New("x")
	if got := Returns(t, "a call", func() error { return want }); got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}

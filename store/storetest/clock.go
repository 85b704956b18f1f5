package storetest

import (
	"sync/atomic"
	"time"
)

// clock is the time the suite waits on: the real one for a store that
// reads its own (Run), or a Clock that the suite moves on (RunClocked).
type clock interface {
	now() time.Time
	sleep(d time.Duration)
}

// realClock is the system's clock; sleeping takes real time.
type realClock struct{}

func (realClock) now() time.Time        { return time.Now() }
func (realClock) sleep(d time.Duration) { time.Sleep(d) }

// clockStart is where the suite's Clock starts: at noon in Tokyo (the
// quota test's calendar) and hours away from the end of a window of a
// thousand hours, so that no boundary falls inside a test.
var clockStart = time.Date(2026, 3, 2, 3, 17, 23, 500_000_000, time.UTC)

// Clock is a clock that stands still until the suite moves it on, for a
// store that reads the clock its test gives it (memstore.Options.Now =
// c.Now). It is safe for concurrent use.
type Clock struct {
	ns atomic.Int64 // Unix ns
}

func newClock(start time.Time) *Clock {
	c := &Clock{}
	c.ns.Store(start.UnixNano())
	return c
}

// Now returns the clock's instant in Unix nanoseconds.
func (c *Clock) Now() int64 { return c.ns.Load() }

func (c *Clock) now() time.Time        { return time.Unix(0, c.ns.Load()) }
func (c *Clock) sleep(d time.Duration) { c.ns.Add(int64(d)) }

package memstore

import (
	"crypto/sha256"
	"math"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The default clock is cached: reading the system clock costs tens of
// nanoseconds on some machines (a third of a decision), so decisions read
// an instant that a goroutine refreshes every clockTick while decisions are
// being made, and every freshEvery-th decision of a shard reads the system
// clock itself. A decision's instant thus lags the wall clock by at most
// about one clockTick, or by the time a shard takes for freshEvery
// decisions when the refreshing goroutine is held up by a busy process.
// With no decisions during a whole tick the goroutine stops, and the next
// decision reads the system clock and starts it again.
const (
	clockTick  = time.Millisecond
	freshEvery = 16
)

// States of a coarseClock.
const (
	clockIdle    int32 = iota // refreshing; no decision since the latest tick
	clockBusy                 // refreshing; decisions since the latest tick
	clockParked               // not refreshing: cached is stale
	clockStopped              // Close has stopped the goroutine
)

// coarseClock is the cached default clock. Its fields sit on a cache line
// of their own: every decision reads it, the goroutine writes it once a
// tick.
type coarseClock struct {
	_      [cacheLine]byte
	cached atomic.Int64 // Unix ns, as of the latest refresh
	state  atomic.Int32
	_      [cacheLine]byte
	wall   *wallClock
	wake   chan struct{}
}

func newCoarseClock() *coarseClock {
	c := &coarseClock{wall: newWallClock(), wake: make(chan struct{}, 1)}
	c.state.Store(clockParked)
	return c
}

// now returns the cached instant, or the system clock's if the cache is
// not being refreshed (and wakes the goroutine that refreshes it).
// Its common case is small enough to be inlined.
func (c *coarseClock) now() int64 {
	if c.state.Load() == clockBusy {
		return c.cached.Load()
	}
	return c.nowSlow()
}

// nowSlow is now for a clock that is not known to be busy.
func (c *coarseClock) nowSlow() int64 {
	if c.state.Load() == clockIdle {
		c.state.CompareAndSwap(clockIdle, clockBusy)
		return c.cached.Load()
	}
	t := c.wall.mono()
	c.cached.Store(t)
	if c.state.CompareAndSwap(clockParked, clockBusy) {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	return t
}

// run refreshes the cache every clockTick while decisions are made, and
// re-reads the wall clock every second, until stop is closed.
func (c *coarseClock) run(stop <-chan struct{}) {
	tick := time.NewTicker(clockTick)
	tick.Stop()
	defer tick.Stop()
	resync := time.NewTicker(time.Second)
	defer resync.Stop()
	defer c.state.Store(clockStopped)
	for {
		select {
		case <-stop:
			return
		case <-resync.C:
			c.wall.sync()
		case <-c.wake:
			c.cached.Store(c.wall.mono())
			tick.Reset(clockTick)
		case <-tick.C:
			c.cached.Store(c.wall.mono())
			if c.state.CompareAndSwap(clockIdle, clockParked) {
				tick.Stop() // nothing decided for a whole tick
			} else {
				c.state.Store(clockIdle)
			}
		}
	}
}

// refine returns the instant for a decision in sh, whose lock is held,
// given now, the instant read before the lock: with the cached clock every
// freshEvery-th decision of the shard reads the system clock, and no
// decision of the shard goes back before that reading.
func (s *Store) refine(sh *shard, now int64) int64 {
	if s.clock == nil {
		return now
	}
	return s.refineCached(sh, now)
}

// refineCached is refine with the cached clock; it is small enough to be
// inlined.
func (s *Store) refineCached(sh *shard, now int64) int64 {
	sh.ticks++
	if sh.ticks%freshEvery == 0 {
		return s.fresh(sh)
	}
	return max(now, sh.seen)
}

// fresh reads the system clock for a decision in sh, whose lock is held.
func (s *Store) fresh(sh *shard) int64 {
	sh.seen = s.clock.wall.mono()
	return sh.seen
}

// SystemBoot reads the machine's boot clock: on Linux, the boot ID of
// /proc/sys/kernel/random/boot_id and the time since boot of /proc/uptime
// (in hundredths of a second, counting time suspended). Elsewhere, or if
// either cannot be read, it reports none.
func SystemBoot() (id string, up time.Duration, ok bool) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", 0, false
	}
	u, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return "", 0, false
	}
	f := strings.Fields(string(u))
	if len(f) == 0 {
		return "", 0, false
	}
	sec, err := strconv.ParseFloat(f[0], 64)
	if err != nil || sec < 0 || sec > float64(math.MaxInt64)/1e9 {
		return "", 0, false
	}
	id = strings.TrimSpace(string(b))
	return id, time.Duration(sec * 1e9), id != ""
}

// bootHash is what a state file records of a boot ID: the first 16 bytes
// of its SHA-256. No boot hashes to all zeros, which stands for none.
func bootHash(id string) [16]byte {
	sum := sha256.Sum256([]byte(id))
	var h [16]byte
	copy(h[:], sum[:])
	if h == ([16]byte{}) {
		h[0] = 1
	}
	return h
}

// timeline returns the store's monotonic timeline's instant, read from the
// clock itself rather than the cached instant decisions use.
func (s *Store) timeline() int64 {
	if s.clock != nil {
		return s.clock.wall.mono()
	}
	return s.now()
}

// shiftTimeline moves the store's timeline by d. New calls it, before the
// clock's goroutine starts and before any decision.
func (s *Store) shiftTimeline(d int64) {
	switch {
	case s.clock != nil:
		s.clock.wall.startUnix += d
	case s.opts.Elapsed != nil:
		s.base += d
	default:
		now := s.opts.Now
		s.now = func() int64 { return now() + d }
	}
}

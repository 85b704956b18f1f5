// Package lograte holds back log lines that a client can cause at will
// (a token that does not verify, a key banned), so that a flood of them
// cannot flood the log: a line passes at most once a second, and the next
// one that passes says how many were held back meanwhile.
package lograte

import (
	"sync/atomic"
	"time"
)

// Gate lets a line through at most once a second. Its zero value is ready
// to use, and it is safe for concurrent use.
type Gate struct {
	last atomic.Int64 // unix ns of the last line let through
	held atomic.Int64 // lines held back since
}

// Pass reports whether a line may be logged at now; when it may, held is
// how many were held back since the last one that passed (a line held back
// at the very moment another passes may be counted by that one: each is
// counted once).
func (g *Gate) Pass(now time.Time) (held int64, ok bool) {
	t := now.UnixNano()
	last := g.last.Load()
	if last != 0 && t-last < int64(time.Second) || !g.last.CompareAndSwap(last, t) {
		g.held.Add(1)
		return 0, false
	}
	return g.held.Swap(0), true
}

//go:build !linux

package edge

import (
	"errors"
	"time"
)

// idleSet is Linux's (epoll); elsewhere a parked connection waits on a
// goroutine of its own.
type idleSet struct{}

func newIdleSet(resume, expire func(*conn)) (*idleSet, error) {
	return nil, errors.New("gateway: edge: idle set: only on Linux")
}

func (*idleSet) hold(*conn) bool     { return false }
func (*idleSet) closeAll() []*conn   { return nil }
func (*idleSet) held() int           { return 0 }
func (*idleSet) expireDue(time.Time) {}

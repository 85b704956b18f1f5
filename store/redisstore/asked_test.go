package redisstore

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// holdFirstWrite holds the first command s writes (not a ping) for d
// before it is written: as a goroutine that writes it does when it waits
// its turn for the CPU.
func holdFirstWrite(t *testing.T, s *Store, d time.Duration) {
	var once sync.Once
	hold := func(b []byte) {
		if strings.Contains(string(b), "PING") {
			return // the client's own ping, not the call's command
		}
		once.Do(func() { time.Sleep(d) })
	}
	s.replies.all.writing.Store(&hold)
	t.Cleanup(func() { s.replies.all.writing.Store(nil) })
}

// TestCommandWrittenLateToAnIdleConnection: a call's command waits in this
// process (its writer held, as a goroutine short of CPU is) for most of
// the deadline while its connection, having answered everything, has
// been idle for longer than a deadline; it is then written, and Redis's
// reply, read at once, is recorded only after the deadline's check looks
// (the reader held as well). The check, on time, saw a connection owing a
// reply and no reply for longer than a deadline, and ended the call: its
// policy refused it and the store was held to have failed, though Redis
// had had the command for a few milliseconds and answered it. Redis's
// silence is now counted from when it was asked: the call is answered by
// Redis, allowed, and nothing is held against the store.
func TestCommandWrittenLateToAnIdleConnection(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux tells what waits unread")
	}
	s := newStandalone(t)
	ls := &lookedStore{Store: s}
	const timeout = 400 * time.Millisecond
	lim := limiter.New(ls, limiter.Options{Timeout: timeout, HardTimeout: 5 * time.Second})
	r := ruletest.With(t, floodgate.Limit{Name: "asked", Algorithm: floodgate.FixedWindow, Max: 1 << 40, Window: time.Hour},
		limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	hits := []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}
	if res, err := lim.Check(context.Background(), hits); err != nil || res.Degraded != limiter.NotDegraded {
		t.Fatalf("first call: %+v, %v", res, err)
	}
	time.Sleep(2 * timeout) // the connection idle, its last reply older than a deadline

	looked := make(chan struct{})
	ls.mu.Lock()
	ls.looked = looked
	ls.mu.Unlock()
	holdFirstWrite(t, s, timeout*3/4)
	holdFirstReply(t, s, looked)

	res, err := lim.Check(context.Background(), hits)
	st := lim.Stats()
	t.Logf("%+v, %v; %+v", res, err, st)
	if err != nil || !res.Allowed || res.Degraded != limiter.NotDegraded || st.StoreFailures != 0 {
		t.Fatalf("a command written late to an idle connection, answered at once: %+v, %v, %d store failures; want allowed by Redis, none",
			res, err, st.StoreFailures)
	}
}

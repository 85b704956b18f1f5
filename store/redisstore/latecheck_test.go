package redisstore

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// lookedStore is the store, telling when the engine first looks at its
// reply clock once armed.
type lookedStore struct {
	*Store
	mu     sync.Mutex
	looked chan struct{} // closed at the first look once armed (nil: not armed)
}

func (s *lookedStore) LastReply(hits []limiter.Hit) (time.Time, bool) {
	last, ok := s.Store.LastReply(hits)
	s.mu.Lock()
	if s.looked != nil {
		close(s.looked)
		s.looked = nil
	}
	s.mu.Unlock()
	return last, ok
}

// stopper readies a shell that continues this process d after it is
// stopped, and returns what stops it (SIGSTOP): as a machine does to a
// process it does not run for a while.
func stopper(t *testing.T, d time.Duration) (stop func()) {
	t.Helper()
	cont := exec.Command("sh", "-c", "read _; sleep "+strconv.FormatFloat(d.Seconds(), 'f', 3, 64)+"; kill -CONT "+strconv.Itoa(os.Getpid()))
	tell, err := cont.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cont.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tell.Close()
		cont.Wait()
	})
	return func() {
		if _, err := tell.Write([]byte("\n")); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(os.Getpid(), syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLateCheckCountsAReplyReadNotYetRecorded: this process stops (SIGSTOP)
// for 600 ms while a call's reply, read off its connection just before,
// is not yet recorded as progress by the goroutine that read it. When the
// process resumes, the deadline's check runs 400 ms late and sees neither
// a reply recorded nor one waiting unread, at the same moment as the
// reader goes on to record it. The call is answered by Redis: not decided
// by policy, no late deadline counted, nothing held against the store.
func TestLateCheckCountsAReplyReadNotYetRecorded(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux tells what waits unread")
	}
	s := newStandalone(t)
	ls := &lookedStore{Store: s}
	const timeout = 200 * time.Millisecond
	lim := limiter.New(ls, limiter.Options{Timeout: timeout, HardTimeout: 5 * time.Second})
	r := ruletest.With(t, floodgate.Limit{Name: "late", Algorithm: floodgate.FixedWindow, Max: 1 << 40, Window: time.Hour},
		limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	hits := []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}
	if res, err := lim.Check(context.Background(), hits); err != nil || res.Degraded != limiter.NotDegraded {
		t.Fatalf("first call: %+v, %v", res, err)
	}

	stop := stopper(t, 600*time.Millisecond)

	looked := make(chan struct{})
	ls.mu.Lock()
	ls.looked = looked
	ls.mu.Unlock()
	read := make(chan struct{})
	var once sync.Once
	hold := func(b []byte) {
		if string(b) == "+PONG\r\n" {
			return // the client's own ping, not the call's reply
		}
		once.Do(func() {
			close(read)
			// The reader resumes with the check: it records the
			// reply a moment after the check looked.
			select {
			case <-looked:
			case <-time.After(10 * time.Second):
			}
			time.Sleep(20 * time.Millisecond)
		})
	}
	s.replies.all.held.Store(&hold)
	defer s.replies.all.held.Store(nil)

	type answer struct {
		res limiter.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := lim.Check(context.Background(), hits)
		done <- answer{res, err}
	}()
	select {
	case <-read:
	case <-time.After(10 * time.Second):
		t.Fatal("no reply read within 10s")
	}
	stopped := time.Now()
	stop()
	var a answer
	select {
	case a = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not end within 10s")
	}
	st := lim.Stats()
	t.Logf("stopped for %v; %+v, %v; %+v", time.Since(stopped), a.res, a.err, st)
	if a.err != nil || !a.res.Allowed || a.res.Degraded != limiter.NotDegraded || st.LateDeadlines != 0 || st.StoreFailures != 0 {
		t.Fatalf("a reply read before the stop, recorded as the process resumed: %+v, %v, %d late deadlines, %d store failures; want allowed by Redis, none",
			a.res, a.err, st.LateDeadlines, st.StoreFailures)
	}
}

// TestLateCheckOnAStoppedRedisEnds: Redis is stopped (SIGSTOP), and so is
// this process, for 600 ms, while a call waits. The deadline's check runs
// late and sees no reply; the second look, half a deadline later, sees
// none either and ends the call by its policy, not held against the store.
func TestLateCheckOnAStoppedRedisEnds(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Options{URL: "redis://" + srv.Addr, Prefix: uniquePrefix(t), EvictionCheck: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const timeout = 200 * time.Millisecond
	lim := limiter.New(s, limiter.Options{Timeout: timeout, HardTimeout: 5 * time.Second})
	r := ruletest.With(t, floodgate.Limit{Name: "late", Algorithm: floodgate.FixedWindow, Max: 1 << 40, Window: time.Hour},
		limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	hits := []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}
	if res, err := lim.Check(context.Background(), hits); err != nil || res.Degraded != limiter.NotDegraded {
		t.Fatalf("first call: %+v, %v", res, err)
	}
	stop := stopper(t, 600*time.Millisecond)
	srv.Pause()
	defer srv.Resume()
	type answer struct {
		res  limiter.Result
		err  error
		took time.Duration
	}
	done := make(chan answer, 1)
	go func() {
		start := time.Now()
		res, err := lim.Check(context.Background(), hits)
		done <- answer{res, err, time.Since(start)}
	}()
	time.Sleep(20 * time.Millisecond)
	stop()
	var a answer
	select {
	case a = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not end within 10s")
	}
	st := lim.Stats()
	t.Logf("%+v, %v after %v; %+v", a.res, a.err, a.took, st)
	if a.err != nil || a.res.Allowed || a.res.Degraded != limiter.DegradedDeadline || st.LateDeadlines != 1 || st.StoreFailures != 0 || st.HardTimeouts != 0 {
		t.Fatalf("a stopped Redis, seen late: %+v, %v, %+v; want denied by policy, one late deadline, nothing held against the store", a.res, a.err, st)
	}
	if a.took > 620*time.Millisecond+timeout {
		t.Fatalf("the call ended after %v, want within the stop and half a deadline more (%v)", a.took, 600*time.Millisecond+timeout/2)
	}
}

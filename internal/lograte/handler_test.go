package lograte

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a clock a test moves by hand.
type clock struct {
	mu   sync.Mutex
	t    time.Time
	ends []func()
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// clock is also the timer of the window ends: ends holds what is to run
// at them, in the order they were asked for, run by fire.
func (c *clock) afterFunc(d time.Duration, f func()) {
	c.mu.Lock()
	c.ends = append(c.ends, f)
	c.mu.Unlock()
}

// fire runs what was to run at the ends of windows.
func (c *clock) fire() {
	c.mu.Lock()
	ends := c.ends
	c.ends = nil
	c.mu.Unlock()
	for _, f := range ends {
		f()
	}
}

func newTestLogger(o HandlerOptions) (*slog.Logger, *bytes.Buffer, *clock) {
	var buf bytes.Buffer
	c := &clock{t: time.Unix(1000, 0)}
	o.Now, o.AfterFunc = c.now, c.afterFunc
	h := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}})
	return slog.New(NewHandler(h, o)), &buf, c
}

// count returns the lines of buf holding sub, and the sum of their
// not_logged_since values.
func count(t *testing.T, buf *bytes.Buffer, sub string) (lines int, held int64) {
	t.Helper()
	lines, held, err := Count(buf.String(), sub)
	if err != nil {
		t.Fatal(err)
	}
	return lines, held
}

// TestHandlerHoldsBackAFlood: 10,000 warnings of one message from eight
// goroutines in one second cost ten lines; the first line of the next
// second says how many were held back, so every line is accounted for.
// Another message, and the same message at another level, keep their own
// allowance; debug lines all pass.
func TestHandlerHoldsBackAFlood(t *testing.T) {
	l, buf, c := newTestLogger(HandlerOptions{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1250 {
				l.Warn("gateway: upstream error", "route", "r")
			}
		}()
	}
	wg.Wait()
	if n, _ := count(t, buf, "upstream error"); n != 10 {
		t.Fatalf("%d lines of a flood of 10,000 in one second, want 10", n)
	}
	l.Error("gateway: upstream error", "route", "r")
	l.Warn("gateway: settle")
	for range 50 {
		l.Debug("gateway: client gone")
	}
	if n, _ := count(t, buf, "level=ERROR"); n != 1 {
		t.Errorf("the same message at another level: %d lines", n)
	}
	if n, _ := count(t, buf, "settle"); n != 1 {
		t.Errorf("another message: %d lines", n)
	}
	if n, _ := count(t, buf, "client gone"); n != 50 {
		t.Errorf("debug lines: %d of 50", n)
	}
	c.add(999 * time.Millisecond)
	l.Warn("gateway: upstream error", "route", "r")
	if n, _ := count(t, buf, "level=WARN msg=\"gateway: upstream error\""); n != 10 {
		t.Fatalf("a line within the second passed: %d lines", n)
	}
	c.add(time.Millisecond)
	l.With("a", 1).Warn("gateway: upstream error", "route", "r")
	n, held := count(t, buf, "level=WARN msg=\"gateway: upstream error\"")
	if n != 11 || int64(n)+held != 10_002 {
		t.Fatalf("%d lines saying %d held back, want 11 accounting for 10,002:\n%s", n, held, buf.String())
	}
	c.fire() // the first window's end: what it held was told since
	if n, _ := count(t, buf, "level=WARN msg=\"gateway: upstream error\""); n != 11 {
		t.Fatalf("a window's end wrote a line told already: %d lines", n)
	}
}

// TestHandlerWritesTheLastLineHeldBack: lines held back that no later
// line tells of (a burst of 25 warnings at a reload, then none) are told
// at the window's end by the last of them, which says how many others
// were held back; it counts as a line of the next window.
func TestHandlerWritesTheLastLineHeldBack(t *testing.T) {
	l, buf, c := newTestLogger(HandlerOptions{})
	for i := range 25 {
		l.Warn("config: a route shadows another", "route", i)
	}
	if n, _ := count(t, buf, "shadows"); n != 10 {
		t.Fatalf("%d lines of a burst of 25, want 10", n)
	}
	c.add(time.Second)
	c.fire()
	n, held := count(t, buf, "shadows")
	if n != 11 || held != 14 || !strings.Contains(buf.String(), "route=24 not_logged_since=14") {
		t.Fatalf("%d lines saying %d held back, want the 25th saying 14:\n%s", n, held, buf.String())
	}
	for i := range 20 {
		l.Warn("config: a route shadows another", "route", 100+i)
	}
	if n, _ := count(t, buf, "shadows"); n != 11+9 {
		t.Fatalf("the window the last line was told in let %d more through, want 9", n-11)
	}
	c.fire()
	if n, held := count(t, buf, "shadows"); n != 21 || int64(n)+held != 45 {
		t.Fatalf("%d lines saying %d held back, want 21 accounting for 45:\n%s", n, held, buf.String())
	}
}

// TestHandlerBoundsItsMessages: lines of more distinct messages than
// Messages share one allowance past it, so a message text that varies
// (if one ever did) cannot grow the table or pass a line each.
func TestHandlerBoundsItsMessages(t *testing.T) {
	l, buf, _ := newTestLogger(HandlerOptions{Messages: 4, Burst: 2})
	h := l.Handler().(*Handler)
	for i := range 1000 {
		l.Warn(fmt.Sprintf("message %d %s", i, strings.Repeat("x", 1000)))
	}
	if n, _ := count(t, buf, "message"); n != 4+2 {
		t.Errorf("%d lines of 1,000 messages, want 6 (the first four's, two shared)", n)
	}
	h.t.mu.Lock()
	defer h.t.mu.Unlock()
	if len(h.t.m) != 4 {
		t.Errorf("%d messages kept, want 4", len(h.t.m))
	}
	for k := range h.t.m {
		if len(k.msg) > maxKeyBytes {
			t.Errorf("a message of %d bytes kept", len(k.msg))
		}
	}
}

// ExampleHandler holds back a flood of one warning.
func ExampleHandler() {
	t := time.Unix(0, 0)
	h := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}})
	var windowEnd func()
	l := slog.New(NewHandler(h, HandlerOptions{Burst: 2,
		Now:       func() time.Time { return t },
		AfterFunc: func(_ time.Duration, f func()) { windowEnd = f },
	}))
	for i := range 100 {
		l.Warn("upstream error", "request", i)
	}
	t = t.Add(time.Second)
	l.Warn("upstream error", "request", 100)
	for i := 101; i < 105; i++ {
		l.Warn("upstream error", "request", i)
	}
	t = t.Add(time.Second)
	windowEnd() // nothing passed since the last two were held back
	// Output:
	// level=WARN msg="upstream error" request=0
	// level=WARN msg="upstream error" request=1
	// level=WARN msg="upstream error" request=100 not_logged_since=98
	// level=WARN msg="upstream error" request=101
	// level=WARN msg="upstream error" request=104 not_logged_since=2
}

// TestCountReadsTextAndJSON: Count accounts for a flood in either form of
// slog's lines, and refuses a count that is no number.
func TestCountReadsTextAndJSON(t *testing.T) {
	for _, json := range []bool{false, true} {
		var buf bytes.Buffer
		var h slog.Handler = slog.NewTextHandler(&buf, nil)
		if json {
			h = slog.NewJSONHandler(&buf, nil)
		}
		var end func()
		l := slog.New(NewHandler(h, HandlerOptions{Burst: 3, AfterFunc: func(_ time.Duration, f func()) { end = f }}))
		for range 40 {
			l.Warn("upstream error")
		}
		end()
		lines, held, err := Count(buf.String(), "upstream error")
		if err != nil || lines != 4 || int64(lines)+held != 40 {
			t.Errorf("json %v: %d lines saying %d held back (%v), want 4 accounting for 40:\n%s", json, lines, held, err, buf.String())
		}
	}
	if _, _, err := Count(`msg=x not_logged_since=many`, "x"); err == nil {
		t.Error("a count that is no number was read")
	}
}

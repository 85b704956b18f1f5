package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// window is a local fixed-window limit used to drive Wait in tests that
// need no service.
type window struct {
	mu       sync.Mutex
	max      int
	w        time.Duration
	start    time.Time
	n        int
	admitted map[time.Time]int // window start → admissions
}

func (l *window) check(context.Context) (Decision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.start) >= l.w {
		l.start = now.Truncate(l.w)
		l.n = 0
	}
	end := l.start.Add(l.w)
	if l.n < l.max {
		l.n++
		if l.admitted == nil {
			l.admitted = map[time.Time]int{}
		}
		l.admitted[l.start]++
		return Decision{Allowed: true, Limit: int64(l.max), Remaining: int64(l.max - l.n), ResetAfter: end.Sub(now)}, nil
	}
	return Decision{Limit: int64(l.max), RetryAfter: end.Sub(now), ResetAfter: end.Sub(now)}, nil
}

func TestWaitSleepsRetryAfterWithJitter(t *testing.T) {
	calls := 0
	var sleeps []time.Duration
	check := func(context.Context) (Decision, error) {
		calls++
		if calls < 3 {
			return Decision{RetryAfter: 30 * time.Millisecond}, nil
		}
		return Decision{Allowed: true, Remaining: 4}, nil
	}
	d, err := Wait(context.Background(), check, WaitOptions{
		Jitter:   10 * time.Millisecond,
		OnDenied: func(_ Decision, s time.Duration) { sleeps = append(sleeps, s) },
	})
	if err != nil || !d.Allowed || calls != 3 {
		t.Fatalf("Wait = %+v, %v after %d calls", d, err, calls)
	}
	for _, s := range sleeps {
		if s < 30*time.Millisecond || s >= 40*time.Millisecond {
			t.Errorf("slept %s, want RetryAfter 30ms plus jitter below 10ms", s)
		}
	}
}

func TestWaitStopsAtContextAndErrors(t *testing.T) {
	deny := func(context.Context) (Decision, error) { return Decision{RetryAfter: time.Hour}, nil }
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := Wait(ctx, deny, WaitOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded at once (the hour is past the deadline)", err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := Wait(ctx2, deny, WaitOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want Canceled", err)
	}
	never := func(context.Context) (Decision, error) { return Decision{}, ErrNeverFits }
	if _, err := Wait(context.Background(), never, WaitOptions{}); !errors.Is(err, ErrNeverFits) {
		t.Fatalf("err = %v, want ErrNeverFits", err)
	}
}

func TestWaitLetsTheLimitThroughPerWindow(t *testing.T) {
	const max, workers = 3, 6
	l := &window{max: max, w: 200 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2 {
				if _, err := Wait(ctx, l.check, WaitOptions{}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for w, n := range l.admitted {
		total += n
		if n > max {
			t.Errorf("window %s let %d through, more than %d", w.Format("15:04:05.000"), n, max)
		}
	}
	if total != 2*workers {
		t.Fatalf("%d calls got through, want %d", total, 2*workers)
	}
}

package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
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

// The Wait tests run in synctest bubbles: the sleeps take no real time
// and the fake clock makes every instant exact.

func TestWaitSleepsRetryAfterWithJitter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		var sleeps []time.Duration
		var at []time.Time
		start := time.Now()
		check := func(context.Context) (Decision, error) {
			calls++
			at = append(at, time.Now())
			if calls < 3 {
				return Decision{RetryAfter: 30 * time.Millisecond}, nil
			}
			return Decision{Allowed: true, Remaining: 4}, nil
		}
		d, err := Wait(context.Background(), check, WaitOptions{
			Jitter:   10 * time.Millisecond,
			OnDenied: func(_ Decision, s time.Duration) { sleeps = append(sleeps, s) },
		})
		if err != nil || !d.Allowed || calls != 3 || len(sleeps) != 2 {
			t.Fatalf("Wait = %+v, %v after %d calls and %d sleeps", d, err, calls, len(sleeps))
		}
		if at[0] != start {
			t.Errorf("first attempt after %s, want at once", at[0].Sub(start))
		}
		for i, s := range sleeps {
			if s < 30*time.Millisecond || s >= 40*time.Millisecond {
				t.Errorf("slept %s, want RetryAfter 30ms plus jitter below 10ms", s)
			}
			if gap := at[i+1].Sub(at[i]); gap != s {
				t.Errorf("attempt %d came %s after the previous, want the chosen sleep %s", i+2, gap, s)
			}
		}
	})
}

func TestWaitStopsAtContextAndErrors(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		deny := func(context.Context) (Decision, error) { return Decision{RetryAfter: time.Hour}, nil }
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		if _, err := Wait(ctx, deny, WaitOptions{}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		if el := time.Since(start); el != 0 {
			t.Fatalf("returned after %s, want at once (the hour is past the deadline)", el)
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
	})
}

// TestWaitLetsTheLimitThroughPerWindow: six callers of two calls each
// against 3 a window. Every denied caller comes back within the next
// window's first tenth (its RetryAfter plus at most 10% jitter), so each of
// the four windows the twelve calls need is filled, and none is overfilled.
func TestWaitLetsTheLimitThroughPerWindow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const max, workers = 3, 6
		l := &window{max: max, w: 200 * time.Millisecond}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
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
			if n != max {
				t.Errorf("window %s let %d through, want exactly %d", w.Format("15:04:05.000"), n, max)
			}
		}
		if total != 2*workers || len(l.admitted) != 4 {
			t.Fatalf("%d calls got through in %d windows, want %d in 4", total, len(l.admitted), 2*workers)
		}
		if el := time.Since(start); el >= 4*l.w {
			t.Errorf("the twelve calls took %s, more than four windows", el)
		}
	})
}

package follow

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestLoopChecksEveryIntervalWithinTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop := context.WithCancel(context.Background())
		var checks, failures int
		var deadlines []time.Duration
		done := make(chan struct{})
		go func() {
			defer close(done)
			Loop(ctx, 100*time.Millisecond, time.Second, func(c context.Context) error {
				checks++
				d, _ := c.Deadline()
				deadlines = append(deadlines, time.Until(d))
				if checks%2 == 0 {
					return errors.New("unreadable")
				}
				return nil
			}, func(error) { failures++ })
		}()
		time.Sleep(450 * time.Millisecond)
		stop()
		<-done
		if checks != 4 || failures != 2 {
			t.Fatalf("%d checks, %d failures; want 4 and 2", checks, failures)
		}
		for _, d := range deadlines {
			if d != time.Second {
				t.Fatalf("a check had %v to run, want 1s", d)
			}
		}
	})
}

func TestLoopStopsWithoutReportingACheckItCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop := context.WithCancel(context.Background())
		failures := 0
		done := make(chan struct{})
		go func() {
			defer close(done)
			Loop(ctx, 10*time.Millisecond, time.Minute, func(c context.Context) error {
				stop()
				<-c.Done()
				return c.Err()
			}, func(error) { failures++ })
		}()
		<-done
		if failures != 0 {
			t.Fatalf("%d failures reported for a check cut by the stop", failures)
		}
	})
}

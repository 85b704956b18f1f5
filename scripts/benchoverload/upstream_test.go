package main

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"
)

func TestUpstreamServesAtItsWorkersCapacity(t *testing.T) {
	up, err := startUpstream(2, 20*time.Millisecond, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer up.close()
	up.setWorkers(1)
	// One worker, a queue of two: of five at once, one is served at once,
	// two wait in the queue, and two find it full.
	type answer struct {
		status int
		marked bool
		took   time.Duration
	}
	answers := make([]answer, 5)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			resp, err := http.Get(up.URL())
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			answers[i] = answer{resp.StatusCode, resp.Header.Get(upstreamHeader) != "", time.Since(t0)}
		}()
	}
	wg.Wait()
	ok, full := 0, 0
	var slowest time.Duration
	for _, a := range answers {
		if !a.marked {
			t.Errorf("an answer without %s", upstreamHeader)
		}
		switch a.status {
		case http.StatusOK:
			ok++
			slowest = max(slowest, a.took)
		case http.StatusServiceUnavailable:
			full++
		}
	}
	if ok != 3 || full != 2 {
		t.Errorf("%d served, %d found the queue full, want 3 and 2", ok, full)
	}
	if slowest < 60*time.Millisecond {
		t.Errorf("the last of three served one at a time took %v, want at least 3 × 20ms", slowest)
	}
	if p := up.peak(); p < 3 || p > 5 {
		t.Errorf("peak = %d, want 3 to 5 (served, queued and, for a moment, refused)", p)
	}
	if p := up.peak(); p != 0 {
		t.Errorf("peak after all answered = %d, want 0", p)
	}
	if m := up.meanService(); m < 20*time.Millisecond || m > 200*time.Millisecond {
		t.Errorf("meanService = %v, want about 20ms", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := up.idle(ctx); err != nil {
		t.Error(err)
	}
}

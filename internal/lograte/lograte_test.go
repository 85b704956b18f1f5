package lograte

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestGate: one line a second passes, from many goroutines at once, and
// every line held back is counted once, by the line let through after it
// (or, held at the instant a line passed, by that line).
func TestGate(t *testing.T) {
	var g Gate
	t0 := time.Unix(1000, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	passed := 0
	var first int64 // held back as the first line passed
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if held, ok := g.Pass(t0); ok {
					mu.Lock()
					passed++
					first += held
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if passed != 1 {
		t.Fatalf("%d lines passed in one instant, want 1", passed)
	}
	if _, ok := g.Pass(t0.Add(999 * time.Millisecond)); ok {
		t.Fatal("a second line passed within the second")
	}
	held, ok := g.Pass(t0.Add(time.Second))
	if !ok || first+held != 800 {
		t.Fatalf("after a second: passed %v, held %d (and %d as the first passed), want true, 800 in all", ok, held, first)
	}
}

func ExampleGate() {
	var g Gate
	t0 := time.Unix(1000, 0)
	for i := range 5 {
		if held, ok := g.Pass(t0.Add(time.Duration(i) * 400 * time.Millisecond)); ok {
			fmt.Printf("line %d logged, %d held back before it\n", i, held)
		}
	}
	// Output:
	// line 0 logged, 0 held back before it
	// line 3 logged, 2 held back before it
}

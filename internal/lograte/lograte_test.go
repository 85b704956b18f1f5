package lograte

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestGate: one line a second passes, from many goroutines at once, and
// the next says how many were held back.
func TestGate(t *testing.T) {
	var g Gate
	t0 := time.Unix(1000, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	passed := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if _, ok := g.Pass(t0); ok {
					mu.Lock()
					passed++
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
	if !ok || held != 800 {
		t.Fatalf("after a second: passed %v, held %d, want true, 800", ok, held)
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

package percpu_test

import (
	"fmt"
	"sync"

	"github.com/floodgate/floodgate/internal/percpu"
)

// Two counters added to from many goroutines: each takes its slot once
// for its adds, and a reader sums the slots.
func ExampleCounters() {
	const requests, refused = 0, 1
	c := percpu.NewCounters(2)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range 100 {
				slot := percpu.Slot()
				c.Add(slot, requests, 1)
				if i%10 == 0 {
					c.Add(slot, refused, 1)
				}
			}
		})
	}
	wg.Wait()
	fmt.Println(c.Load(requests), c.Load(refused))
	// Output: 400 40
}

package memstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// A store with a key cap and a state file: the counts survive a restart.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "memstore-example")
	defer os.RemoveAll(dir)
	opts := memstore.Options{MaxKeys: 100_000, StatePath: filepath.Join(dir, "floodgate.state")}

	daily, _ := limiter.NewRule(floodgate.Limit{Name: "daily", Algorithm: floodgate.Quota,
		Max: 3, Period: floodgate.Day}, floodgate.FailOpen, false)
	hit := []limiter.Hit{{Rule: daily, Key: "api-key-1", Cost: 1}}
	out := make([]floodgate.Decision, 1)

	s, _ := memstore.New(opts)
	for range 2 {
		_ = s.Decide(context.Background(), hit, false, out)
	}
	_ = s.Close() // writes a last snapshot

	s, _ = memstore.New(opts) // a restart
	defer s.Close()
	_ = s.Decide(context.Background(), hit, false, out)
	fmt.Println("loaded keys:", s.Stats().Loaded)
	fmt.Println("remaining today:", out[0].Remaining)
	_ = s.Decide(context.Background(), hit, false, out)
	fmt.Println("fourth request allowed:", out[0].Allowed, "- retry within a day:", out[0].RetryAfter <= 24*time.Hour)
	// Output:
	// loaded keys: 1
	// remaining today: 0
	// fourth request allowed: false - retry within a day: true
}

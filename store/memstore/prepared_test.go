package memstore_test

import (
	"runtime"
	"testing"
	"weak"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestRulesGoWithTheirHashes: the hash of a rule's ID lives on the rule,
// so a rule dropped (a policy reload) that holds no key is freed; before,
// a table of recent rules kept up to 64 of them.
func TestRulesGoWithTheirHashes(t *testing.T) {
	s := newStore(t, memstore.Options{})
	var ws []weak.Pointer[limiter.Rule]
	for i := range 100 {
		r := windowRule(t, int64(i+1))
		if d := peek(t, s, limiter.Hit{Rule: r, Key: "k", Cost: 1})[0]; !d.Allowed || d.Remaining != int64(i) {
			t.Fatalf("rule %d: %+v", i, d)
		}
		ws = append(ws, weak.Make(r))
	}
	for range 10 {
		runtime.GC()
	}
	for i, w := range ws {
		if w.Value() != nil {
			t.Fatalf("rule %d is still held after it was dropped", i)
		}
	}
}

package limiter_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"weak"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// freed reports whether the rules behind ws were all collected: nothing
// holds them once their users dropped them.
func freed(ws []weak.Pointer[limiter.Rule]) bool {
	for range 10 {
		runtime.GC()
	}
	for _, w := range ws {
		if w.Value() != nil {
			return false
		}
	}
	return true
}

// TestPrepared: a rule builds its prepared form once per slot, whoever
// asks and however many ask at once; slots are independent, beyond the
// fixed ones too; the zero Slot keeps nothing.
func TestPrepared(t *testing.T) {
	r := window(t, "w", 5, floodgate.FailOpen)
	slots := make([]limiter.Slot, 12) // more than a rule holds without a lock
	for i := range slots {
		slots[i] = limiter.NewSlot()
	}
	var builds [12]atomic.Int64
	var wg sync.WaitGroup
	got := make([][12]any, 8)
	for g := range got {
		wg.Go(func() {
			for i, s := range slots {
				got[g][i] = r.Prepared(s, func(rr *limiter.Rule) any {
					if rr != r {
						t.Errorf("build of slot %d got another rule", i)
					}
					builds[i].Add(1)
					return new(int)
				})
			}
		})
	}
	wg.Wait()
	for i := range slots {
		for g := range got {
			if got[g][i] != got[0][i] {
				t.Fatalf("slot %d: goroutines %d and 0 got different forms", i, g)
			}
		}
		if i > 0 && got[0][i] == got[0][i-1] {
			t.Fatalf("slots %d and %d share a form", i-1, i)
		}
		again := r.Prepared(slots[i], func(*limiter.Rule) any { t.Fatalf("slot %d built again", i); return nil })
		if again != got[0][i] {
			t.Fatalf("slot %d: a later ask got another form", i)
		}
	}
	n := 0
	for range 3 {
		r.Prepared(limiter.Slot{}, func(*limiter.Rule) any { n++; return nil })
	}
	if n != 3 {
		t.Fatalf("the zero Slot built %d times of 3", n)
	}
	if allocs := testing.AllocsPerRun(100, func() { r.Prepared(slots[0], nil) }); allocs != 0 {
		t.Fatalf("a prepared form read allocates %v times", allocs)
	}
}

// TestLocalRulesGoWithTheirRules: the local counterparts the engine makes
// of FailLocal rules while the store fails live on the rules, and a rule
// dropped (a policy reload) is freed with them, whatever the number of
// rules; before, a cache keyed by rule held up to 4,096 of them.
func TestLocalRulesGoWithTheirRules(t *testing.T) {
	t.Parallel()
	ts := &testStore{inner: newMem(t)}
	ts.fail.Store(true)
	l := limiter.New(ts, limiter.Options{Local: newMem(t), Instances: 2, Breaker: limiter.BreakerOptions{Failures: 1 << 30}})
	var ws []weak.Pointer[limiter.Rule]
	for i := range 50 {
		r := window(t, "w", int64(10+i), floodgate.FailLocal)
		res := check(t, l, limiter.Hit{Rule: r, Key: "k", Cost: 1})
		if res.Degraded == limiter.NotDegraded || res.Decisions[0].Limit != int64(10+i)/2 {
			t.Fatalf("rule %d: %+v, want decided by the local share", i, res)
		}
		ws = append(ws, weak.Make(r))
	}
	if !freed(ws) {
		t.Fatal("rules dropped are still held after a failover")
	}
	runtime.KeepAlive(l) // the engine lives on: only the rules may go
}

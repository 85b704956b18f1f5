package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// Run runs the whole suite against the stores newStore returns, on their
// own clocks: where time must pass, the suite waits for it. newStore is
// called once per subtest; it may return the same store every time.
//
// Every store is held to Store.Decide. The subtests of concurrency limits
// and releases run for a store that implements limiter.Releaser, those of
// refunds for one that implements limiter.Refunder: a store without them
// has nothing there to answer for (the engine refuses concurrency limits on
// it, and keeps every charge), and Run logs the subtests it left out. Run
// asks newStore for one store first, with t, to see which verbs it has.
// RunReservations holds a limiter.Reserver to its verbs.
func Run(t *testing.T, newStore func(t *testing.T) limiter.Store) {
	run(t, newStore, realClock{})
}

// RunClocked runs the suite as Run does against stores that read the clock
// the suite gives them (for the embedded store, memstore.Options.Now set
// to c.Now): where Run waits for time to pass, RunClocked moves c on. All
// the calls of newStore get the same clock.
func RunClocked(t *testing.T, newStore func(t *testing.T, c *Clock) limiter.Store) {
	c := newClock(clockStart)
	run(t, func(t *testing.T) limiter.Store { return newStore(t, c) }, c)
}

func run(t *testing.T, newStore func(t *testing.T) limiter.Store, c clock) {
	tests := []struct {
		name  string
		f     func(*testing.T, limiter.Store)
		needs verb // releaseOp or refundOp: the optional verb the test needs
	}{
		{"TokenBucket", testTokenBucket, 0},
		{"GCRA", testGCRA, 0},
		{"LeakyBucket", testLeakyBucket, 0},
		{"LeakyQueue", testLeakyQueue, 0},
		{"FixedWindow", func(t *testing.T, s limiter.Store) { testFixedWindow(t, s, c) }, 0},
		{"SlidingLog", testSlidingLog, 0},
		{"SlidingWindow", testSlidingWindow, 0},
		{"Concurrency", testConcurrency, releaseOp},
		{"Quota", func(t *testing.T, s limiter.Store) { testQuota(t, s, c) }, 0},
		{"CostAboveCapacity", testNeverFits, 0},
		{"InvalidCost", testInvalidCost, 0},
		{"AllOrNothing", testAllOrNothing, 0},
		{"Shadow", testShadow, 0},
		{"Peek", testPeek, 0},
		{"Release", testRelease, releaseOp},
		{"ReleaseOtherAlgorithms", testReleaseOther, releaseOp},
		{"Refund", testRefund, refundOp},
		{"RefundMarked", testRefundMarked, refundOp},
		{"RefundMarkedAfterTheWindow", func(t *testing.T, s limiter.Store) { testRefundMarkedAfterTheWindow(t, s, c) }, refundOp},
		{"PeekCostAboveCapacity", testPeekNeverFits, 0},
		{"LeakyQueueTwoStage", testLeakyQueueTwoStage, 0},
		{"IdleExpiry", func(t *testing.T, s limiter.Store) { testIdleExpiry(t, s, c) }, 0},
		{"ConcurrentExact", testConcurrentExact, 0},
		{"ConcurrentExactTokenBucket", testConcurrentExactTokenBucket, 0},
		{"ConcurrentExactThreeLimits", testConcurrentThreeLimits, 0},
		{"Check", testCheck, 0},
		{"CheckOrder", testCheckOrder, 0},
		{"Group", testGroup, 0},
		{"GroupAcrossSubjects", testGroupAcrossSubjects, 0},
		{"ConcurrentExactGroup", testConcurrentGroup, 0},
		{"SameCounterTwice", testSameCounterTwice, 0},
	}
	probe := newStore(t)
	for _, tc := range tests {
		if !has(probe, tc.needs) {
			t.Logf("%s not run: the store does not implement %s", tc.name, needNames[tc.needs])
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			tc.f(t, newStore(t))
		})
	}
}

// has reports whether s implements what v needs.
func has(s limiter.Store, v verb) bool {
	switch v {
	case releaseOp:
		_, ok := s.(limiter.Releaser)
		return ok
	case refundOp:
		_, ok := s.(limiter.Refunder)
		return ok
	case reserveOp:
		_, ok := s.(limiter.Reserver)
		return ok
	}
	return true
}

// hour and long are spans no test run comes close to: a limit refilling one
// unit an hour does not refill during a test, and a window of a thousand
// hours practically never ends during one.
const (
	hour = time.Hour
	long = 1000 * time.Hour
)

// key returns a key no other test uses, with the given suffix.
func key(suffix string) string {
	return fmt.Sprintf("st%016x:%s", rand.Uint64(), suffix)
}

// verb is what a test asks of a store: one of the verbs of limiter.Store
// and its optional interfaces.
type verb uint8

const (
	chargeOp  verb = iota + 1 // Decide
	peekOp                    // Decide, peek
	releaseOp                 // limiter.Releaser
	refundOp                  // limiter.Refunder
	reserveOp                 // limiter.Reserver's Reserve
)

var (
	verbNames = [...]string{chargeOp: "Decide", peekOp: "Decide (peek)", releaseOp: "Release", refundOp: "Refund", reserveOp: "Reserve"}
	needNames = [...]string{releaseOp: "limiter.Releaser", refundOp: "limiter.Refunder", reserveOp: "limiter.Reserver"}
)

// apply asks s for v on hits and returns the decisions (none for a release
// or a refund, which answer none).
func apply(s limiter.Store, v verb, hits ...limiter.Hit) ([]floodgate.Decision, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out := make([]floodgate.Decision, len(hits))
	var err error
	switch v {
	case chargeOp, peekOp:
		err = s.Decide(ctx, hits, v == peekOp, out)
	case releaseOp:
		out, err = nil, s.(limiter.Releaser).Release(ctx, hits)
	case refundOp:
		out, err = nil, s.(limiter.Refunder).Refund(ctx, hits)
	case reserveOp:
		err = s.(limiter.Reserver).Reserve(ctx, hits, out)
	}
	return out, err
}

func must(t testing.TB, s limiter.Store, v verb, hits ...limiter.Hit) []floodgate.Decision {
	t.Helper()
	out, err := apply(s, v, hits...)
	if err != nil {
		t.Fatalf("%s: %v", verbNames[v], err)
	}
	return out
}

// charge charges one hit and returns its decision.
func charge(t testing.TB, s limiter.Store, h limiter.Hit) floodgate.Decision {
	t.Helper()
	return must(t, s, chargeOp, h)[0]
}

func peek(t testing.TB, s limiter.Store, h limiter.Hit) floodgate.Decision {
	t.Helper()
	return must(t, s, peekOp, h)[0]
}

// within reports whether d lies in [lo, hi].
func within(d, lo, hi time.Duration) bool { return d >= lo && d <= hi }

// wantAllowed checks an allowed decision's limit and remaining units.
func wantAllowed(t testing.TB, what string, d floodgate.Decision, limit, remaining int64) {
	t.Helper()
	if !d.Allowed || d.Limit != limit || d.Remaining != remaining || d.RetryAfter != 0 {
		t.Fatalf("%s: got %+v, want allowed with limit %d, remaining %d, no retry", what, d, limit, remaining)
	}
}

// wantDenied checks a denial and that its RetryAfter lies in [lo, hi].
func wantDenied(t testing.TB, what string, d floodgate.Decision, limit int64, lo, hi time.Duration) {
	t.Helper()
	if d.Allowed || d.Limit != limit || !within(d.RetryAfter, lo, hi) {
		t.Fatalf("%s: got %+v, want denied with limit %d, retry after in [%v, %v]", what, d, limit, lo, hi)
	}
}

// testRate is the shared contract of the token bucket, GCRA and the leaky
// bucket meter at one unit an hour with a burst of 5.
func testRate(t *testing.T, s limiter.Store, alg floodgate.Algorithm) {
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: alg, Rate: 1, Per: hour, Burst: 5})
	h := limiter.Hit{Rule: r, Key: key("rate"), Cost: 1}
	for i := int64(1); i <= 5; i++ {
		d := charge(t, s, h)
		wantAllowed(t, fmt.Sprintf("request %d", i), d, 5, 5-i)
		// The bucket is back to full after the used units refill.
		if !within(d.ResetAfter, time.Duration(i)*hour-time.Minute, time.Duration(i)*hour) {
			t.Fatalf("request %d: reset after %v, want about %d h", i, d.ResetAfter, i)
		}
	}
	d := charge(t, s, h)
	wantDenied(t, "request 6", d, 5, hour-time.Minute, hour)
	if d.Remaining != 0 {
		t.Fatalf("request 6: remaining %d, want 0", d.Remaining)
	}
	// A cost of 2 on a bucket with 1 token: one more unit must refill first.
	h2 := limiter.Hit{Rule: r, Key: key("rate2"), Cost: 4}
	wantAllowed(t, "cost 4", charge(t, s, h2), 5, 1)
	h2.Cost = 2
	wantDenied(t, "cost 2 with 1 left", charge(t, s, h2), 5, hour-time.Minute, hour)
	h2.Cost = 1
	wantAllowed(t, "cost 1 with 1 left", charge(t, s, h2), 5, 0)
}

func testTokenBucket(t *testing.T, s limiter.Store) { testRate(t, s, floodgate.TokenBucket) }
func testGCRA(t *testing.T, s limiter.Store)        { testRate(t, s, floodgate.GCRA) }
func testLeakyBucket(t *testing.T, s limiter.Store) { testRate(t, s, floodgate.LeakyBucket) }

func testLeakyQueue(t *testing.T, s limiter.Store) {
	// One request an hour leaves the queue; 3 may wait; none passes early.
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.LeakyQueue, Rate: 1, Per: hour, Burst: 3, Delay: 0})
	h := limiter.Hit{Rule: r, Key: key("queue"), Cost: 1}
	for i := range 4 {
		d := charge(t, s, h)
		if !d.Allowed {
			t.Fatalf("request %d: denied (%+v), want queued", i+1, d)
		}
		want := time.Duration(i) * hour
		if !within(d.Delay, want-time.Minute, want) {
			t.Fatalf("request %d: delay %v, want about %v", i+1, d.Delay, want)
		}
	}
	wantDenied(t, "request 5 (queue full)", charge(t, s, h), 4, hour-time.Minute, hour)

	// NoDelay lets the whole burst through at once.
	r = ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.LeakyQueue, Rate: 1, Per: hour, Burst: 3, Delay: floodgate.NoDelay})
	h = limiter.Hit{Rule: r, Key: key("nodelay"), Cost: 1}
	for i := range 4 {
		if d := charge(t, s, h); !d.Allowed || d.Delay != 0 {
			t.Fatalf("nodelay request %d: %+v, want allowed without delay", i+1, d)
		}
	}
	if d := charge(t, s, h); d.Allowed {
		t.Fatalf("nodelay request 5: %+v, want denied", d)
	}
}

// testRefund gives back charges: a queued request that leaves frees its
// place for the next one, a bucket never refills beyond full, and a
// window keeps its count when the refund does not say where it was
// charged (Hit.Mark; testRefundMarked gives it back).
func testRefund(t *testing.T, s limiter.Store) {
	q := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.LeakyQueue, Rate: 1, Per: hour, Burst: 2})
	h := limiter.Hit{Rule: q, Key: key("refundq"), Cost: 1}
	var last floodgate.Decision
	for i := range 3 {
		if last = charge(t, s, h); !last.Allowed {
			t.Fatalf("queued request %d refused: %+v", i+1, last)
		}
	}
	if d := peek(t, s, h); d.Allowed {
		t.Fatalf("full queue accepts: %+v", d)
	}
	must(t, s, refundOp, h)
	// A refund answers nothing; what it gave back shows in the next
	// decision, the same on every store.
	wantAllowed(t, "peek after a refund", peek(t, s, h), 3, 0)
	d := charge(t, s, h)
	if !d.Allowed || !within(d.Delay, last.Delay-time.Minute, last.Delay+time.Minute) {
		t.Fatalf("after a refund: %+v, want the freed place (delay about %v)", d, last.Delay)
	}

	b := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: 1, Per: hour, Burst: 3})
	hb := limiter.Hit{Rule: b, Key: key("refundb"), Cost: 2}
	wantAllowed(t, "bucket cost 2", charge(t, s, hb), 3, 1)
	hb.Cost = 3
	must(t, s, refundOp, hb) // more than was taken: the bucket is just full
	wantAllowed(t, "bucket after refund (peek of 1)", peek(t, s, limiter.Hit{Rule: b, Key: hb.Key, Cost: 1}), 3, 2)
	wantAllowed(t, "bucket after refund", charge(t, s, hb), 3, 0)

	w := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.FixedWindow, Max: 2, Window: long})
	hw := limiter.Hit{Rule: w, Key: key("refundw"), Cost: 2}
	wantAllowed(t, "window cost 2", charge(t, s, hw), 2, 0)
	must(t, s, refundOp, hw)
	hw.Cost = 1
	if d := charge(t, s, hw); d.Allowed {
		t.Fatalf("a fixed window gave a charge back: %+v", d)
	}
	hw.Cost = 0
	if _, err := apply(s, refundOp, hw); !errors.Is(err, floodgate.ErrInvalidCost) {
		t.Fatalf("refund of cost 0: %v, want ErrInvalidCost", err)
	}
}

// testRefundMarked gives back the charge of a window, a sliding log, a
// sliding window and a quota whose refund names where it was counted
// (Decision.Mark): exactly the refund's cost, not the other charges.
// A store whose decisions carry no mark gives those charges nothing back
// (testRefund holds it to that), and is left out.
func testRefundMarked(t *testing.T, s limiter.Store) {
	for _, l := range []floodgate.Limit{
		{Algorithm: floodgate.FixedWindow, Max: 3, Window: long},
		{Algorithm: floodgate.SlidingLog, Max: 3, Window: long},
		{Algorithm: floodgate.SlidingWindow, Max: 3, Window: long},
		{Algorithm: floodgate.Quota, Max: 3, Period: floodgate.Month},
	} {
		r := ruletest.Rule(t, l)
		h := limiter.Hit{Rule: r, Key: key("refundmark"), Cost: 1}
		wantAllowed(t, l.Algorithm.String()+" cost 1", charge(t, s, h), 3, 2)
		h.Cost = 2
		d := charge(t, s, h)
		wantAllowed(t, l.Algorithm.String()+" cost 2", d, 3, 0)
		if d.Mark == 0 {
			t.Skipf("%s: the store's decisions carry no mark", l.Algorithm)
		}
		h.Mark = d.Mark
		must(t, s, refundOp, h)
		h.Mark = 0
		wantAllowed(t, l.Algorithm.String()+" after the refund (peek of 2)", peek(t, s, h), 3, 0)
		wantAllowed(t, l.Algorithm.String()+" charged again", charge(t, s, h), 3, 0)
		h.Cost = 1
		if d := peek(t, s, h); d.Allowed {
			t.Fatalf("%s: the refund gave back more than its charge: %+v", l.Algorithm, d)
		}
	}
}

// testRefundMarkedAfterTheWindow refunds a charge of a one-second fixed
// window, and of a sliding log of a second, once the window it was
// counted in has passed and a new charge counts in the next: the window
// that passed has nothing to give back, and the new one keeps its charge.
func testRefundMarkedAfterTheWindow(t *testing.T, s limiter.Store, c clock) {
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingLog} {
		r := ruletest.Rule(t, floodgate.Limit{Algorithm: alg, Max: 2, Window: time.Second})
		h := limiter.Hit{Rule: r, Key: key("refundmarkold"), Cost: 2}
		old := charge(t, s, h)
		if !old.Allowed {
			t.Fatalf("%s: the first charge: %+v, want allowed", alg, old)
		}
		if old.Mark == 0 {
			t.Skipf("%s: the store's decisions carry no mark", alg)
		}
		deadline := c.now().Add(20 * time.Second)
		for {
			c.sleep(1100 * time.Millisecond)
			if d := peek(t, s, h); d.Allowed {
				break
			}
			if c.now().After(deadline) {
				t.Fatalf("%s: key still charged 20 s after a 1 s window: %+v", alg, peek(t, s, h))
			}
		}
		h.Cost = 1
		if d := charge(t, s, h); !d.Allowed {
			t.Fatalf("%s: a charge in the next window: %+v, want allowed", alg, d)
		}
		h.Cost, h.Mark = 2, old.Mark
		must(t, s, refundOp, h)
		h.Cost, h.Mark = 2, 0
		if d := peek(t, s, h); d.Allowed || d.Remaining != 1 {
			t.Fatalf("%s: a refund of a charge whose window passed took from the next: peek of 2 %+v, want denied with 1 remaining", alg, d)
		}
	}
}

// testWindow checks a window algorithm with 3 units per window.
func testWindow(t *testing.T, s limiter.Store, alg floodgate.Algorithm, window time.Duration) {
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: alg, Max: 3, Window: window})
	h := limiter.Hit{Rule: r, Key: key("window"), Cost: 1}
	for i := int64(1); i <= 3; i++ {
		wantAllowed(t, fmt.Sprintf("request %d", i), charge(t, s, h), 3, 3-i)
	}
	d := charge(t, s, h)
	wantDenied(t, "request 4", d, 3, time.Nanosecond, 2*window)
	if d.Remaining != 0 {
		t.Fatalf("request 4: remaining %d, want 0", d.Remaining)
	}
	// Cost 2 on a fresh key, then 2 more do not fit, 1 does.
	h = limiter.Hit{Rule: r, Key: key("window2"), Cost: 2}
	wantAllowed(t, "cost 2", charge(t, s, h), 3, 1)
	if d := charge(t, s, h); d.Allowed || d.Remaining != 1 {
		t.Fatalf("cost 2 with 1 left: %+v, want denied with 1 remaining", d)
	}
	h.Cost = 1
	wantAllowed(t, "cost 1 with 1 left", charge(t, s, h), 3, 0)
}

func testFixedWindow(t *testing.T, s limiter.Store, c clock) {
	testWindow(t, s, floodgate.FixedWindow, long)
	// The reset is the end of the epoch-aligned window.
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.FixedWindow, Max: 1, Window: long})
	d := charge(t, s, limiter.Hit{Rule: r, Key: key("fw"), Cost: 1})
	now := c.now().UnixNano()
	want := time.Duration(int64(long) - now%int64(long))
	if !within(d.ResetAfter, want-time.Minute, want+time.Minute) {
		t.Fatalf("reset after %v, want about %v (the window's end)", d.ResetAfter, want)
	}
}

func testSlidingLog(t *testing.T, s limiter.Store) {
	testWindow(t, s, floodgate.SlidingLog, hour)
	// The denial waits for the oldest entry to leave the window.
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.SlidingLog, Max: 1, Window: hour})
	h := limiter.Hit{Rule: r, Key: key("log"), Cost: 1}
	charge(t, s, h)
	wantDenied(t, "second", charge(t, s, h), 1, hour-time.Minute, hour)
}

func testSlidingWindow(t *testing.T, s limiter.Store) {
	testWindow(t, s, floodgate.SlidingWindow, long)
}

func testConcurrency(t *testing.T, s limiter.Store) {
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.Concurrency, Max: 2, LeaseTTL: hour})
	k := key("conc")
	lease := func(id uint64) limiter.Hit { return limiter.Hit{Rule: r, Key: k, Cost: 1, Lease: id} }
	wantAllowed(t, "lease 1", charge(t, s, lease(1)), 2, 1)
	wantAllowed(t, "lease 2", charge(t, s, lease(2)), 2, 0)
	d := charge(t, s, lease(3))
	if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 {
		t.Fatalf("lease 3 while 2 are held: %+v, want denied with a retry hint", d)
	}
	// Re-acquiring a held lease does not take a second slot.
	if d := charge(t, s, lease(2)); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("re-acquiring lease 2: %+v, want allowed with 0 remaining", d)
	}
	must(t, s, releaseOp, lease(1))
	wantAllowed(t, "lease 3 after releasing 1", charge(t, s, lease(3)), 2, 0)
}

func testQuota(t *testing.T, s limiter.Store, c clock) {
	loc, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		loc = time.UTC
	}
	// Stay clear of a day boundary while the test runs.
	now := c.now().In(loc)
	y, m, dd := now.Date()
	next := time.Date(y, m, dd+1, 0, 0, 0, 0, loc)
	if next.Sub(c.now()) < 30*time.Second {
		c.sleep(next.Sub(c.now()) + time.Second)
		now = c.now().In(loc)
		y, m, dd = now.Date()
		next = time.Date(y, m, dd+1, 0, 0, 0, 0, loc)
	}
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.Quota, Max: 3, Period: floodgate.Day, Location: loc})
	h := limiter.Hit{Rule: r, Key: key("quota"), Cost: 1}
	for i := int64(1); i <= 3; i++ {
		d := charge(t, s, h)
		wantAllowed(t, fmt.Sprintf("request %d", i), d, 3, 3-i)
		want := next.Sub(c.now())
		if !within(d.ResetAfter, want-time.Minute, want+time.Minute) {
			t.Fatalf("request %d: reset after %v, want about %v (next midnight in %s)", i, d.ResetAfter, want, loc)
		}
	}
	want := next.Sub(c.now())
	wantDenied(t, "request 4", charge(t, s, h), 3, want-time.Minute, want+time.Minute)
}

func testNeverFits(t *testing.T, s limiter.Store) {
	for _, l := range []floodgate.Limit{
		{Algorithm: floodgate.TokenBucket, Rate: 1, Per: hour, Burst: 5},
		{Algorithm: floodgate.FixedWindow, Max: 5, Window: long},
		{Algorithm: floodgate.SlidingLog, Max: 5, Window: hour},
		{Algorithm: floodgate.Quota, Max: 5, Period: floodgate.Month},
	} {
		r := ruletest.Rule(t, l)
		h := limiter.Hit{Rule: r, Key: key("never"), Cost: 6}
		if _, err := apply(s, chargeOp, h); !errors.Is(err, floodgate.ErrNeverFits) {
			t.Fatalf("%s: cost 6 of 5: err %v, want ErrNeverFits", l.Algorithm, err)
		}
		// Nothing was taken.
		h.Cost = 1
		wantAllowed(t, l.Algorithm.String()+" after the refused cost", charge(t, s, h), 5, 4)
	}
}

func testInvalidCost(t *testing.T, s limiter.Store) {
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.FixedWindow, Max: 5, Window: long})
	for _, c := range []int64{0, -1} {
		if _, err := apply(s, chargeOp, limiter.Hit{Rule: r, Key: key("cost"), Cost: c}); !errors.Is(err, floodgate.ErrInvalidCost) {
			t.Fatalf("cost %d: err %v, want ErrInvalidCost", c, err)
		}
	}
}

func testAllOrNothing(t *testing.T, s limiter.Store) {
	user := ruletest.Rule(t, floodgate.Limit{Name: "st_user", Algorithm: floodgate.FixedWindow, Max: 10, Window: long})
	route := ruletest.Rule(t, floodgate.Limit{Name: "st_route", Algorithm: floodgate.TokenBucket, Rate: 1, Per: hour, Burst: 2})
	global := ruletest.Rule(t, floodgate.Limit{Name: "st_global", Algorithm: floodgate.SlidingLog, Max: 10, Window: hour})
	hits := []limiter.Hit{
		{Rule: user, Key: key("user"), Cost: 1},
		{Rule: route, Key: key("route"), Cost: 1},
		{Rule: global, Key: key("global"), Cost: 1},
	}
	for i := 1; i <= 2; i++ {
		out := must(t, s, chargeOp, hits...)
		for j, d := range out {
			if !d.Allowed {
				t.Fatalf("request %d, hit %d: %+v, want allowed", i, j, d)
			}
		}
	}
	for i := 3; i <= 5; i++ {
		out := must(t, s, chargeOp, hits...)
		if out[1].Allowed {
			t.Fatalf("request %d: route allowed %+v, want denied", i, out[1])
		}
		// The others are reported as they stand, without the charge.
		wantAllowed(t, "user as peeked", out[0], 10, 7)
		wantAllowed(t, "global as peeked", out[2], 10, 7)
	}
	// The denied requests took nothing from the others.
	wantAllowed(t, "user after denials", peek(t, s, hits[0]), 10, 7)
	wantAllowed(t, "global after denials", peek(t, s, hits[2]), 10, 7)

	// The denying hit first and last; a new key on the allowing ones that
	// a denied request must not create.
	full := limiter.Hit{Rule: user, Key: key("full"), Cost: 10}
	charge(t, s, full)
	full.Cost = 1
	fresh := limiter.Hit{Rule: global, Key: key("fresh"), Cost: 3}
	for _, order := range [][]limiter.Hit{{full, fresh}, {fresh, full}} {
		out := must(t, s, chargeOp, order...)
		if out[0].Allowed == out[1].Allowed {
			t.Fatalf("order %v: %+v, want one allowed and one denied", order, out)
		}
	}
	wantAllowed(t, "fresh key after denied requests", peek(t, s, limiter.Hit{Rule: global, Key: fresh.Key, Cost: 1}), 10, 9)
}

func testShadow(t *testing.T, s limiter.Store) {
	// A shadow limit that denies blocks nothing and is not charged.
	sh := ruletest.Shadow(t, floodgate.Limit{Name: "st_shadow", Algorithm: floodgate.FixedWindow, Max: 1, Window: long})
	en := ruletest.Rule(t, floodgate.Limit{Name: "st_enforced", Algorithm: floodgate.FixedWindow, Max: 5, Window: long})
	hits := []limiter.Hit{{Rule: sh, Key: key("shadow"), Cost: 1}, {Rule: en, Key: key("enforced"), Cost: 1}}
	out := must(t, s, chargeOp, hits...)
	wantAllowed(t, "shadow, first", out[0], 1, 0)
	wantAllowed(t, "enforced, first", out[1], 5, 4)
	out = must(t, s, chargeOp, hits...)
	if out[0].Allowed {
		t.Fatalf("shadow, second: %+v, want denied", out[0])
	}
	wantAllowed(t, "enforced, second (shadow denial does not block)", out[1], 5, 3)
	if d := peek(t, s, hits[0]); d.Allowed || d.Remaining != 0 {
		t.Fatalf("shadow after: %+v, want exhausted", d)
	}

	// An enforced denial stops the shadow hit's charge too.
	sh2 := ruletest.Shadow(t, floodgate.Limit{Name: "st_shadow2", Algorithm: floodgate.FixedWindow, Max: 5, Window: long})
	en2 := ruletest.Rule(t, floodgate.Limit{Name: "st_enforced2", Algorithm: floodgate.FixedWindow, Max: 1, Window: long})
	hits = []limiter.Hit{{Rule: sh2, Key: key("shadow2"), Cost: 1}, {Rule: en2, Key: key("enforced2"), Cost: 1}}
	must(t, s, chargeOp, hits...)
	out = must(t, s, chargeOp, hits...)
	if out[1].Allowed {
		t.Fatalf("enforced, second: %+v, want denied", out[1])
	}
	wantAllowed(t, "shadow after an enforced denial", peek(t, s, hits[0]), 5, 3)
}

func testPeek(t *testing.T, s limiter.Store) {
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.GCRA, Rate: 1, Per: hour, Burst: 3})
	h := limiter.Hit{Rule: r, Key: key("peek"), Cost: 1}
	for range 5 {
		// Remaining is what the peeked cost would leave.
		wantAllowed(t, "peek on a fresh key", peek(t, s, h), 3, 2)
	}
	wantAllowed(t, "first charge after peeks", charge(t, s, h), 3, 2)
	h.Cost = 2
	charge(t, s, h)
	h.Cost = 1
	for range 3 {
		wantDenied(t, "peek on an empty bucket", peek(t, s, h), 3, hour-time.Minute, hour)
	}
	// Several hits, one of them denying: nothing charged either way.
	w := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.FixedWindow, Max: 2, Window: long})
	hw := limiter.Hit{Rule: w, Key: key("peekw"), Cost: 1}
	out := must(t, s, peekOp, hw, h)
	if !out[0].Allowed || out[1].Allowed {
		t.Fatalf("peek of two: %+v, want allowed then denied", out)
	}
	wantAllowed(t, "window after peeks", charge(t, s, hw), 2, 1)
}

func testRelease(t *testing.T, s limiter.Store) {
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.Concurrency, Max: 3, LeaseTTL: hour})
	k := key("release")
	h := func(lease uint64, cost int64) limiter.Hit {
		return limiter.Hit{Rule: r, Key: k, Cost: cost, Lease: lease}
	}
	wantAllowed(t, "lease 10 (cost 2)", charge(t, s, h(10, 2)), 3, 1)
	wantAllowed(t, "lease 11", charge(t, s, h(11, 1)), 3, 0)
	must(t, s, releaseOp, h(10, 2))
	wantAllowed(t, "after releasing lease 10", peek(t, s, h(12, 1)), 3, 1)
	// Releasing again, or a lease never taken, changes nothing.
	must(t, s, releaseOp, h(10, 2))
	must(t, s, releaseOp, h(99, 1))
	must(t, s, releaseOp, limiter.Hit{Rule: r, Key: key("never-taken"), Cost: 1, Lease: 5})
	wantAllowed(t, "peek after releases", peek(t, s, h(12, 1)), 3, 1)
	must(t, s, releaseOp, h(11, 1))
	wantAllowed(t, "all released", peek(t, s, h(12, 3)), 3, 0)
}

func testIdleExpiry(t *testing.T, s limiter.Store, c clock) {
	// A one-second window: once it has passed, the key is as new.
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.SlidingLog, Max: 2, Window: time.Second})
	h := limiter.Hit{Rule: r, Key: key("idle"), Cost: 1}
	charge(t, s, h)
	charge(t, s, h)
	d := charge(t, s, h)
	if d.Allowed {
		// More than a second passed between the charges (a very loaded
		// machine); the key is then already back, which is the point.
		t.Logf("third charge allowed after a stall: %+v", d)
	}
	deadline := c.now().Add(20 * time.Second)
	for {
		c.sleep(1100 * time.Millisecond)
		if d := peek(t, s, h); d.Allowed && d.Remaining == 1 {
			break
		}
		if c.now().After(deadline) {
			t.Fatalf("key still charged 20 s after a 1 s window: %+v", peek(t, s, h))
		}
	}
	wantAllowed(t, "after the window", charge(t, s, h), 2, 1)
}

// hammer runs goroutines that each try attempts requests and returns how
// many were allowed.
func hammer(t *testing.T, goroutines, attempts int, try func(g int) (bool, error)) int64 {
	var allowed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range attempts {
				ok, err := try(g)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return allowed.Load()
}

func testConcurrentExact(t *testing.T, s limiter.Store) {
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.FixedWindow, Max: 1000, Window: long})
	h := limiter.Hit{Rule: r, Key: key("exact"), Cost: 1}
	got := hammer(t, 50, 30, func(int) (bool, error) {
		out, err := apply(s, chargeOp, h)
		return out[0].Allowed, err
	})
	if got != 1000 {
		t.Fatalf("50 goroutines × 30 requests on a limit of 1000: %d allowed, want exactly 1000", got)
	}
}

func testConcurrentExactTokenBucket(t *testing.T, s limiter.Store) {
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: 1, Per: hour, Burst: 1000})
	h := limiter.Hit{Rule: r, Key: key("exacttb"), Cost: 1}
	got := hammer(t, 50, 30, func(int) (bool, error) {
		out, err := apply(s, chargeOp, h)
		return out[0].Allowed, err
	})
	if got != 1000 {
		t.Fatalf("token bucket of 1000: %d allowed, want exactly 1000", got)
	}
}

func testConcurrentThreeLimits(t *testing.T, s limiter.Store) {
	// 10 users of 50 each, one route of 300, a global limit of 1000: the
	// route binds, so exactly 300 pass, and the denied requests take
	// nothing from the users or the global limit.
	user := ruletest.Rule(t, floodgate.Limit{Name: "st_user", Algorithm: floodgate.FixedWindow, Max: 50, Window: long})
	route := ruletest.Rule(t, floodgate.Limit{Name: "st_route", Algorithm: floodgate.FixedWindow, Max: 300, Window: long})
	global := ruletest.Rule(t, floodgate.Limit{Name: "st_global", Algorithm: floodgate.TokenBucket, Rate: 1, Per: hour, Burst: 1000})
	users := make([]string, 10)
	for i := range users {
		users[i] = key(fmt.Sprintf("user%d", i))
	}
	routeKey, globalKey := key("route"), key("global")
	var perUser [10]atomic.Int64
	got := hammer(t, 50, 20, func(g int) (bool, error) {
		u := g % 10
		out, err := apply(s, chargeOp,
			limiter.Hit{Rule: user, Key: users[u], Cost: 1},
			limiter.Hit{Rule: route, Key: routeKey, Cost: 1},
			limiter.Hit{Rule: global, Key: globalKey, Cost: 1})
		if err != nil {
			return false, err
		}
		all := out[0].Allowed && out[1].Allowed && out[2].Allowed
		if all {
			perUser[u].Add(1)
		}
		return all, nil
	})
	if got != 300 {
		t.Fatalf("%d requests passed all three limits, want exactly 300", got)
	}
	wantAllowed(t, "global after the run", peek(t, s, limiter.Hit{Rule: global, Key: globalKey, Cost: 1}), 1000, 1000-300-1)
	for i, k := range users {
		used := perUser[i].Load()
		if used > 50 {
			t.Fatalf("user %d: %d allowed, more than its limit of 50", i, used)
		}
		d := peek(t, s, limiter.Hit{Rule: user, Key: k, Cost: 1})
		// A peek reports what would remain after the peeked unit.
		if want := max(0, 50-used-1); d.Remaining != want || d.Allowed != (used < 50) {
			t.Fatalf("user %d: %d allowed, peek %+v, want %d remaining", i, used, d, want)
		}
	}
}

func testReleaseOther(t *testing.T, s limiter.Store) {
	// Release leaves every other algorithm alone.
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.FixedWindow, Max: 5, Window: long})
	h := limiter.Hit{Rule: r, Key: key("relother"), Cost: 2, Lease: 7}
	charge(t, s, h)
	must(t, s, releaseOp, h)
	h.Cost = 1
	wantAllowed(t, "window after the release", peek(t, s, h), 5, 2)
}

func testPeekNeverFits(t *testing.T, s limiter.Store) {
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.GCRA, Rate: 1, Per: hour, Burst: 3})
	if _, err := apply(s, peekOp, limiter.Hit{Rule: r, Key: key("peeknever"), Cost: 4}); !errors.Is(err, floodgate.ErrNeverFits) {
		t.Fatalf("peek of cost 4 on a burst of 3: err %v, want ErrNeverFits", err)
	}
}

func testLeakyQueueTwoStage(t *testing.T, s limiter.Store) {
	// NGINX's delay=1: the first two pass at once, the next two wait one
	// and two intervals, the fifth is refused.
	r := ruletest.Rule(t, floodgate.Limit{Algorithm: floodgate.LeakyQueue, Rate: 1, Per: hour, Burst: 3, Delay: 1})
	h := limiter.Hit{Rule: r, Key: key("twostage"), Cost: 1}
	for i, want := range []time.Duration{0, 0, hour, 2 * hour} {
		d := charge(t, s, h)
		if !d.Allowed || !within(d.Delay, max(0, want-time.Minute), want) {
			t.Fatalf("request %d: %+v, want allowed with a delay of about %v", i+1, d, want)
		}
	}
	if d := charge(t, s, h); d.Allowed {
		t.Fatalf("request 5: %+v, want refused", d)
	}
}

// testCheck: a check hit is decided and never charged; when it denies, it
// stops the request as any hit does.
func testCheck(t *testing.T, s limiter.Store) {
	r := ruletest.Rule(t, floodgate.Limit{Name: "st_check", Algorithm: floodgate.FixedWindow, Max: 3, Window: long})
	other := ruletest.Rule(t, floodgate.Limit{Name: "st_check_other", Algorithm: floodgate.FixedWindow, Max: 10, Window: long})
	subject := key("check")
	k := limiter.Hit{Rule: r, Key: subject, Cost: 1}
	o := limiter.Hit{Rule: other, Key: subject, Cost: 1}
	charge(t, s, k)
	charge(t, s, k)
	check := k
	check.Check = true
	for i := 0; i < 3; i++ {
		out := must(t, s, chargeOp, check, o)
		wantAllowed(t, "check with room", out[0], 3, 0) // as peeked: after its cost
		wantAllowed(t, "the other hit", out[1], 10, 9-int64(i))
	}
	wantAllowed(t, "the checked limit after three checks", peek(t, s, k), 3, 0)
	charge(t, s, k) // now full
	out := must(t, s, chargeOp, check, o)
	if out[0].Allowed {
		t.Fatalf("check of a full limit: %+v, want denied", out[0])
	}
	wantAllowed(t, "the other hit after a denying check, as peeked", out[1], 10, 6)
	wantAllowed(t, "the other hit took nothing", peek(t, s, o), 10, 6)
	if d := must(t, s, chargeOp, check)[0]; d.Allowed {
		t.Fatalf("a lone check of a full limit: %+v, want denied", d)
	}
}

// testCheckOrder: the hits of a request are decided in order, so a check
// after a charge of the same limit and key sees it, and one before does
// not.
func testCheckOrder(t *testing.T, s limiter.Store) {
	r := ruletest.Rule(t, floodgate.Limit{Name: "st_order", Algorithm: floodgate.FixedWindow, Max: 1, Window: long})
	h := limiter.Hit{Rule: r, Key: key("order"), Cost: 1}
	check := h
	check.Check = true
	// The check first: it sees room, and the charge takes it.
	out := must(t, s, chargeOp, check, h)
	if !out[0].Allowed || !out[1].Allowed {
		t.Fatalf("check then charge on an empty limit of 1: %+v, want both allowed", out)
	}
	if d := peek(t, s, h); d.Allowed {
		t.Fatalf("after check then charge: %+v, want the limit full", d)
	}
	// The charge first: the check sees it, denies, and nothing is taken.
	h2 := limiter.Hit{Rule: r, Key: key("order2"), Cost: 1}
	check2 := h2
	check2.Check = true
	out = must(t, s, chargeOp, h2, check2)
	if !out[0].Allowed || out[1].Allowed {
		t.Fatalf("charge then check on an empty limit of 1: %+v, want the charge allowed and the check denied", out)
	}
	wantAllowed(t, "after charge then check: refused, nothing taken", peek(t, s, h2), 1, 0)
}

// testGroup: hits of a group stop the request only when all of them deny;
// then the hits that allow are charged and those that deny are not.
func testGroup(t *testing.T, s limiter.Store) {
	a := ruletest.Rule(t, floodgate.Limit{Name: "st_group_a", Algorithm: floodgate.FixedWindow, Max: 2, Window: long})
	b := ruletest.Rule(t, floodgate.Limit{Name: "st_group_b", Algorithm: floodgate.FixedWindow, Max: 4, Window: long})
	c := ruletest.Rule(t, floodgate.Limit{Name: "st_group_c", Algorithm: floodgate.FixedWindow, Max: 100, Window: long})
	sh := ruletest.Shadow(t, floodgate.Limit{Name: "st_group_shadow", Algorithm: floodgate.FixedWindow, Max: 100, Window: long})
	subject := key("group")
	ha := limiter.Hit{Rule: a, Key: subject, Cost: 1, Group: 1}
	hb := limiter.Hit{Rule: b, Key: subject, Cost: 1, Group: 1}
	hc := limiter.Hit{Rule: c, Key: subject, Cost: 1}
	hs := limiter.Hit{Rule: sh, Key: subject, Cost: 1, Group: 1}
	for i := 0; i < 4; i++ {
		out := must(t, s, chargeOp, ha, hb, hc)
		if !out[1].Allowed || !out[2].Allowed || out[0].Allowed != (i < 2) {
			t.Fatalf("request %d: %+v, want a allowed only for the first two, b and c allowed", i, out)
		}
	}
	if d := peek(t, s, ha); d.Allowed || d.Remaining != 0 {
		t.Fatalf("a after four: %+v, want it full (charged twice, not four times)", d)
	}
	if d := peek(t, s, hb); d.Allowed {
		t.Fatalf("b after four: %+v, want it full", d)
	}
	wantAllowed(t, "c after four", peek(t, s, hc), 100, 95)
	// a and b full: the group stops the request; c is not charged. A
	// shadow hit in the group that allows changes nothing.
	out := must(t, s, chargeOp, ha, hb, hs, hc)
	if out[0].Allowed || out[1].Allowed || !out[2].Allowed {
		t.Fatalf("a and b full: %+v, want both denied, the shadow allowed", out)
	}
	wantAllowed(t, "c after the group stopped the request", peek(t, s, hc), 100, 95)
	wantAllowed(t, "the shadow hit took nothing", peek(t, s, hs), 100, 99)
	// A second group: each must pass.
	hd := limiter.Hit{Rule: c, Key: subject, Cost: 1, Group: 2}
	out = must(t, s, chargeOp, hd, ha)
	if !out[0].Allowed || out[0].Remaining != 95 {
		t.Fatalf("group 2 allowed, group 1 full: %+v", out)
	}
	wantAllowed(t, "c after a request stopped by its other group", peek(t, s, hc), 100, 95)
}

// testGroupAcrossSubjects: a group whose hits count for different
// subjects (different Cluster slots on Redis) is decided as one.
func testGroupAcrossSubjects(t *testing.T, s limiter.Store) {
	a := ruletest.Rule(t, floodgate.Limit{Name: "st_gx_a", Algorithm: floodgate.FixedWindow, Max: 1, Window: long})
	c := ruletest.Rule(t, floodgate.Limit{Name: "st_gx_c", Algorithm: floodgate.FixedWindow, Max: 100, Window: long})
	ha := limiter.Hit{Rule: a, Key: key("gx1"), Cost: 1, Group: 1}
	hb := limiter.Hit{Rule: a, Key: key("gx2"), Cost: 1, Group: 1}
	hc := limiter.Hit{Rule: c, Key: key("gx3"), Cost: 1}
	if out := must(t, s, chargeOp, ha, hb, hc); !out[0].Allowed || !out[1].Allowed || !out[2].Allowed {
		t.Fatalf("first request: %+v, want all allowed", out)
	}
	out := must(t, s, chargeOp, ha, hb, hc)
	if out[0].Allowed || out[1].Allowed {
		t.Fatalf("both full: %+v, want both denied", out)
	}
	wantAllowed(t, "c after a request stopped by the group", peek(t, s, hc), 100, 98)
	// One full, one with room: through.
	hb.Key = key("gx4")
	if out := must(t, s, chargeOp, ha, hb, hc); out[0].Allowed || !out[1].Allowed || !out[2].Allowed {
		t.Fatalf("a full, b fresh: %+v, want b and c allowed", out)
	}
	wantAllowed(t, "c after the request went through its group", peek(t, s, hc), 100, 97)
}

// testConcurrentGroup: 50 goroutines on a group of two limits of one
// subject, 60 and 100 units, with a third hit outside the group: every
// request goes ahead while one of the two has room and takes a unit of
// each that has, so exactly 100 pass.
func testConcurrentGroup(t *testing.T, s limiter.Store) {
	a := ruletest.Rule(t, floodgate.Limit{Name: "st_cg_a", Algorithm: floodgate.FixedWindow, Max: 60, Window: long})
	b := ruletest.Rule(t, floodgate.Limit{Name: "st_cg_b", Algorithm: floodgate.FixedWindow, Max: 100, Window: long})
	c := ruletest.Rule(t, floodgate.Limit{Name: "st_cg_c", Algorithm: floodgate.FixedWindow, Max: 10000, Window: long})
	subject := key("cg")
	hits := []limiter.Hit{{Rule: a, Key: subject, Cost: 1, Group: 1}, {Rule: b, Key: subject, Cost: 1, Group: 1},
		{Rule: c, Key: subject, Cost: 1}}
	got := hammer(t, 50, 4, func(int) (bool, error) {
		out, err := apply(s, chargeOp, hits...)
		return err == nil && out[2].Allowed && (out[0].Allowed || out[1].Allowed), err
	})
	if got != 100 {
		t.Fatalf("a group of 60 and 100 under 200 concurrent requests: %d went ahead, want exactly 100", got)
	}
	wantAllowed(t, "the third hit, charged by each request that went ahead", peek(t, s, hits[2]), 10000, 10000-100-1)
}

// testSameCounterTwice: a request that names one counter twice (one limit
// and key in two hits: a library caller's batch, one descriptor twice in
// a rate-limit request) is decided as two requests one after the other
// would be, the second hit seeing what the first takes, for every
// algorithm, and a peek of it answers as its charge would (the peek
// charging nothing). Capacity 3: two hits of 2 ask for 4, so the second
// is refused and, all or nothing, neither is charged; two hits of 1 are
// both allowed, the second leaving 1.
func testSameCounterTwice(t *testing.T, s limiter.Store) {
	for _, l := range []floodgate.Limit{
		{Algorithm: floodgate.TokenBucket, Rate: 1, Per: hour, Burst: 3},
		{Algorithm: floodgate.GCRA, Rate: 1, Per: hour, Burst: 3},
		{Algorithm: floodgate.LeakyBucket, Rate: 1, Per: hour, Burst: 3},
		{Algorithm: floodgate.FixedWindow, Max: 3, Window: long},
		{Algorithm: floodgate.SlidingLog, Max: 3, Window: long},
		{Algorithm: floodgate.SlidingWindow, Max: 3, Window: long},
		{Algorithm: floodgate.Concurrency, Max: 3, LeaseTTL: hour},
		{Algorithm: floodgate.Quota, Max: 3, Period: floodgate.Day},
	} {
		if l.Algorithm == floodgate.Concurrency && !has(s, releaseOp) {
			continue
		}
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			r := ruletest.Rule(t, l)
			k := key("twice")
			hit := func(cost int64, lease uint64) limiter.Hit {
				return limiter.Hit{Rule: r, Key: k, Cost: cost, Lease: lease}
			}
			for _, v := range []verb{peekOp, chargeOp} {
				out := must(t, s, v, hit(2, 1), hit(2, 2))
				if !out[0].Allowed || out[1].Allowed {
					t.Fatalf("%s of 2 and 2 on one counter of 3: %+v; want the first allowed and the second refused, as one after the other", verbNames[v], out)
				}
			}
			// Nothing was charged: a peek of 3 fits.
			if d := peek(t, s, hit(3, 3)); !d.Allowed {
				t.Fatalf("after the refused request: %+v, want 3 free (nothing charged)", d)
			}
			for _, v := range []verb{peekOp, chargeOp} {
				out := must(t, s, v, hit(1, 4), hit(1, 5))
				if !out[0].Allowed || !out[1].Allowed || out[0].Remaining != 2 || out[1].Remaining != 1 {
					t.Fatalf("%s of 1 and 1 on one counter of 3: %+v; want both allowed, leaving 2 then 1", verbNames[v], out)
				}
			}
			if d := peek(t, s, hit(1, 6)); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("after charging 1 and 1: %+v, want 1 free", d)
			}
		})
	}
}

package limiter_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// clockStore is a memstore on a clock the test moves.
func clockStore(t *testing.T) (*memstore.Store, *atomic.Int64) {
	t.Helper()
	var now atomic.Int64
	now.Store(int64(1000 * time.Hour))
	s, err := memstore.New(memstore.Options{Now: now.Load, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, &now
}

// TestReserveSettle follows a request whose cost is known afterwards:
// the estimate is reserved with the request's other limits, all or
// nothing, then settled below (the rest comes back) or above (the excess
// is charged as far as the limit allows, the rest reported as overrun).
func TestReserveSettle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := limiter.New(newMem(t), limiter.Options{})
	rpm := window(t, "rpm", 60, floodgate.FailOpen)
	tpm := bucket(t, "tpm", 1000, floodgate.FailOpen)
	req := func(estimate int64) *limiter.Request {
		return &limiter.Request{Hits: []limiter.Hit{
			{Rule: rpm, Key: "k", Cost: 1},
			{Rule: tpm, Key: "k", Cost: estimate, Reserve: true},
		}}
	}
	var res limiter.Result
	r1 := req(600)
	if err := l.Decide(ctx, r1, &res); err != nil || !res.Allowed {
		t.Fatalf("reserve 600: %v %+v", err, res)
	}
	if r1.Reservation == 0 || r1.Hits[1].Lease != r1.Reservation {
		t.Fatalf("no reservation named: %+v", r1)
	}
	if got := res.Decisions[1].Remaining; got != 400 {
		t.Fatalf("remaining %d after reserving 600 of 1000", got)
	}
	// 600 are held: a second estimate of 500 does not fit, and the
	// request limit is not charged for it either.
	if err := l.Decide(ctx, req(500), &res); err != nil || res.Allowed || res.Binding != 1 {
		t.Fatalf("reserve 500 with 400 left: %v %+v", err, res)
	}
	if err := l.Settle(ctx, r1, []int64{0, 150}, &res); err != nil || !res.Allowed {
		t.Fatalf("settle 150: %v %+v", err, res)
	}
	if d := res.Decisions[1]; d.Remaining != 850 || d.Overrun != 0 {
		t.Fatalf("after settling 150 of 600: %+v, want 850 free", d)
	}
	r2 := req(500)
	if err := l.Decide(ctx, r2, &res); err != nil || !res.Allowed {
		t.Fatalf("reserve 500 after the settle: %v %+v", err, res)
	}
	if err := l.Settle(ctx, r2, []int64{0, 1200}, &res); err != nil {
		t.Fatal(err)
	}
	if d := res.Decisions[1]; d.Remaining != 0 || d.Overrun != 350 {
		t.Fatalf("settle 1200 of 500 with 350 left: %+v, want 350 charged and 350 overrun", d)
	}
	if got, _ := l.Peek(ctx, []limiter.Hit{{Rule: rpm, Key: "k", Cost: 1}}); got.Decisions[0].Remaining != 57 {
		t.Fatalf("request limit: %+v, want 2 requests charged (57 left after a peek)", got.Decisions[0])
	}

	// A second settle is refused and changes nothing.
	err := l.Settle(ctx, r2, []int64{0, 0}, &res)
	if !errors.Is(err, limiter.ErrReservationUnknown) {
		t.Fatalf("second settle: %v, want ErrReservationUnknown", err)
	}
	if got, _ := l.Peek(ctx, []limiter.Hit{{Rule: tpm, Key: "k", Cost: 1}}); got.Allowed {
		t.Fatalf("a refused settle gave units back: %+v", got.Decisions[0])
	}
	if err := l.Settle(ctx, r2, []int64{0, -1}, &res); !errors.Is(err, floodgate.ErrInvalidCost) {
		t.Fatalf("negative actual cost: %v", err)
	}
	if err := l.Settle(ctx, r2, []int64{0}, &res); err == nil {
		t.Fatal("settle with too few costs accepted")
	}
}

// TestReservationExpires settles a reservation at its estimate when its
// TTL passes without a settle: its units stay charged and a late settle is
// refused.
func TestReservationExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, now := clockStore(t)
	l := limiter.New(s, limiter.Options{})
	w := window(t, "w", 10, floodgate.FailOpen)
	req := &limiter.Request{TTL: time.Minute, Hits: []limiter.Hit{{Rule: w, Key: "k", Cost: 4, Reserve: true}}}
	var res limiter.Result
	if err := l.Decide(ctx, req, &res); err != nil || !res.Allowed {
		t.Fatal(err, res)
	}
	now.Add(int64(59 * time.Second))
	if st := s.Stats(); st.Reservations != 1 {
		t.Fatalf("%d reservations held, want 1", st.Reservations)
	}
	now.Add(int64(time.Second))
	if err := l.Settle(ctx, req, []int64{0}, &res); !errors.Is(err, limiter.ErrReservationUnknown) {
		t.Fatalf("settle after the TTL: %v, want ErrReservationUnknown", err)
	}
	if got, _ := l.Peek(ctx, []limiter.Hit{{Rule: w, Key: "k", Cost: 1}}); got.Decisions[0].Remaining != 5 {
		t.Fatalf("%+v: want the estimate of 4 kept (5 left after a peek)", got.Decisions[0])
	}
	req2 := &limiter.Request{TTL: time.Minute, Hits: []limiter.Hit{{Rule: w, Key: "k", Cost: 1, Reserve: true}}}
	if err := l.Decide(ctx, req2, &res); err != nil {
		t.Fatal(err)
	}
	now.Add(int64(2 * time.Minute))
	s.Sweep()
	if st := s.Stats(); st.Reservations != 0 || st.ReservationsExpired != 1 {
		t.Fatalf("after a sweep: %+v", st)
	}
}

// TestSettleSameLimitTwice: one limit and key reserved twice in one
// request is one settle record (the sum of the estimates) in the store, so
// it settles once, at the sum of the actual costs: at the estimates nothing
// changes and nothing is unknown, where settling the hits one by one gave
// the first the whole record, refunding units, then refused the second
// with ErrReservationUnknown. A request naming a hit twice that was
// reserved once (a forged token) settles the record once too, at the sum.
func TestSettleSameLimitTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := limiter.New(newMem(t), limiter.Options{})
	tpm := bucket(t, "tpm", 1000, floodgate.FailOpen)
	remaining := func(key string) int64 {
		t.Helper()
		got, err := l.Peek(ctx, []limiter.Hit{{Rule: tpm, Key: key, Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return got.Decisions[0].Remaining + 1
	}
	req := &limiter.Request{Hits: []limiter.Hit{
		{Rule: tpm, Key: "k", Cost: 300, Reserve: true},
		{Rule: tpm, Key: "k", Cost: 200, Reserve: true},
	}}
	var res limiter.Result
	if err := l.Decide(ctx, req, &res); err != nil || !res.Allowed {
		t.Fatalf("reserve: %v %+v", err, res)
	}
	if got := remaining("k"); got != 500 {
		t.Fatalf("%d free after reserving 300 and 200 of 1000", got)
	}
	if err := l.Settle(ctx, req, []int64{300, 200}, &res); err != nil || !res.Allowed {
		t.Fatalf("settle at the estimates: %v %+v", err, res)
	}
	if got := remaining("k"); got != 500 || res.Decisions[0] != res.Decisions[1] || res.Decisions[0].Remaining != 500 {
		t.Fatalf("after settling at the estimates: %d free, decisions %+v; want 500 and both alike", got, res.Decisions)
	}
	first := slices.Clone(res.Decisions)
	if err := l.Settle(ctx, req, []int64{300, 200}, &res); err != nil || !slices.Equal(res.Decisions, first) {
		t.Fatalf("the same settle sent again: %v %+v, want the first answer %+v", err, res.Decisions, first)
	}
	if err := l.Settle(ctx, req, []int64{300, 100}, &res); !errors.Is(err, limiter.ErrReservationUnknown) {
		t.Fatalf("a settle at other costs after the first: %v, want ErrReservationUnknown", err)
	}
	// Above the estimates, the overrun is reported once.
	req2 := &limiter.Request{Hits: []limiter.Hit{
		{Rule: tpm, Key: "o", Cost: 400, Reserve: true},
		{Rule: tpm, Key: "o", Cost: 400, Reserve: true},
	}}
	if err := l.Decide(ctx, req2, &res); err != nil || !res.Allowed {
		t.Fatalf("reserve 800: %v %+v", err, res)
	}
	if err := l.Settle(ctx, req2, []int64{700, 700}, &res); err != nil {
		t.Fatal(err)
	}
	if d := res.Decisions; d[0].Overrun != 400 || d[1].Overrun != 0 || d[0].Remaining != 0 {
		t.Fatalf("settle 1400 of 800 with 200 left: %+v, want 200 charged and 400 overrun, once", d)
	}
	// Reserved once, settled as if twice: one record, settled once, at the
	// sum (here a cancel).
	one := &limiter.Request{Hits: []limiter.Hit{{Rule: tpm, Key: "f", Cost: 300, Reserve: true}}}
	if err := l.Decide(ctx, one, &res); err != nil || !res.Allowed {
		t.Fatal(err, res)
	}
	forged := &limiter.Request{Reservation: one.Reservation, Hits: []limiter.Hit{
		{Rule: tpm, Key: "f", Cost: 300, Reserve: true},
		{Rule: tpm, Key: "f", Cost: 300, Reserve: true},
	}}
	if err := l.Settle(ctx, forged, []int64{0, 0}, &res); err != nil || !res.Allowed {
		t.Fatalf("settle of a hit named twice: %v %+v", err, res)
	}
	if got := remaining("f"); got != 1000 {
		t.Fatalf("%d free after cancelling the reservation, want 1000", got)
	}
}

// TestReserveLongKey settles a reservation whose key the engine replaced
// by its hash: the caller settles with the key it reserved with.
func TestReserveLongKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := limiter.New(newMem(t), limiter.Options{MaxKeyBytes: 16})
	w := window(t, "w", 10, floodgate.FailOpen)
	k := strings.Repeat("x", 100)
	req := &limiter.Request{Hits: []limiter.Hit{{Rule: w, Key: k, Cost: 4, Reserve: true}}}
	var res limiter.Result
	if err := l.Decide(ctx, req, &res); err != nil || !res.Allowed {
		t.Fatal(err, res)
	}
	again := &limiter.Request{Reservation: req.Reservation, Hits: []limiter.Hit{{Rule: w, Key: k, Cost: 4, Reserve: true}}}
	if err := l.Settle(ctx, again, []int64{1}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Decisions[0].Remaining != 9 {
		t.Fatalf("%+v", res.Decisions[0])
	}
}

// TestReserveDegraded decides a reservation by its failure policy while
// the store fails: nothing is kept to settle, and settling says so.
func TestReserveDegraded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts := &testStore{inner: newMem(t)}
	ts.fail.Store(true)
	l := limiter.New(ts, limiter.Options{Local: newMem(t), Breaker: limiter.BreakerOptions{Failures: 1000}})
	w := window(t, "w", 10, floodgate.FailLocal)
	req := &limiter.Request{Hits: []limiter.Hit{{Rule: w, Key: "k", Cost: 4, Reserve: true}}}
	var res limiter.Result
	if err := l.Decide(ctx, req, &res); err != nil || !res.Allowed || res.Degraded == limiter.NotDegraded {
		t.Fatalf("%v %+v", err, res)
	}
	ts.fail.Store(false)
	if err := l.Settle(ctx, req, []int64{0}, &res); !errors.Is(err, limiter.ErrReservationUnknown) {
		t.Fatalf("settle of a degraded reservation: %v", err)
	}
}

// Reserve passes on to the wrapped store, which must keep reservations.
func (s *testStore) Reserve(ctx context.Context, hits []limiter.Hit, out []floodgate.Decision) error {
	return s.call(ctx, func() error { return s.inner.(limiter.Reserver).Reserve(ctx, hits, out) })
}

// Settle passes on to the wrapped store, which must keep reservations.
func (s *testStore) Settle(ctx context.Context, hits []limiter.Hit, out []limiter.Settled) error {
	return s.call(ctx, func() error { return s.inner.(limiter.Reserver).Settle(ctx, hits, out) })
}

// plainStore shows only Store.Decide of its store: a store written
// outside this module that keeps no reservations, leases or refunds.
type plainStore struct{ limiter.Store }

// TestReserveWithoutReservations: on a store that keeps no reservations,
// a reserved hit is checked without being held and its settle charges the
// actual cost as far as it fits; the other hits are charged at once.
func TestReserveWithoutReservations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := limiter.New(plainStore{newMem(t)}, limiter.Options{})
	rpm := window(t, "rpm", 60, floodgate.FailOpen)
	tpm := window(t, "tpm", 100, floodgate.FailOpen)
	req := &limiter.Request{Hits: []limiter.Hit{{Rule: rpm, Key: "k", Cost: 1}, {Rule: tpm, Key: "k", Cost: 80, Reserve: true}}}
	var res limiter.Result
	if err := l.Decide(ctx, req, &res); err != nil || !res.Allowed {
		t.Fatal(err, res)
	}
	if got, _ := l.Peek(ctx, []limiter.Hit{{Rule: tpm, Key: "k", Cost: 1}}); got.Decisions[0].Remaining != 99 {
		t.Fatalf("the estimate was charged: %+v", got.Decisions[0])
	}
	if err := l.Settle(ctx, req, []int64{0, 30}, &res); err != nil || res.Decisions[1].Remaining != 70 {
		t.Fatalf("settle 30: %v %+v", err, res.Decisions[1])
	}
	if err := l.Settle(ctx, req, []int64{0, 90}, &res); err != nil || res.Decisions[1].Overrun != 90 {
		t.Fatalf("settle 90 with 70 left: %v %+v, want it all reported as overrun", err, res.Decisions[1])
	}
	if got, _ := l.Peek(ctx, []limiter.Hit{{Rule: rpm, Key: "k", Cost: 1}}); got.Decisions[0].Remaining != 58 {
		t.Fatalf("request limit: %+v", got.Decisions[0])
	}
}

// TestSettleSameRequestLongKey settles a reservation with the very
// Request that made it, whose long key Decide replaced by its hash, under
// a key cap shorter than a hash: the hash is the key the store knows, and
// is not hashed again.
func TestSettleSameRequestLongKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := limiter.New(newMem(t), limiter.Options{MaxKeyBytes: 16})
	w := window(t, "w", 10, floodgate.FailOpen)
	req := &limiter.Request{Hits: []limiter.Hit{{Rule: w, Key: strings.Repeat("x", 100), Cost: 4, Reserve: true}}}
	var res limiter.Result
	if err := l.Decide(ctx, req, &res); err != nil || !res.Allowed {
		t.Fatal(err, res)
	}
	if err := l.Settle(ctx, req, []int64{1}, &res); err != nil {
		t.Fatal(err)
	}
	if d := res.Decisions[0]; d.Remaining != 9 {
		t.Fatalf("%+v, want 1 of 10 used", d)
	}
}

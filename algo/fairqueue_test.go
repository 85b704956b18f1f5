package algo

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

func newFQ[K comparable, T any](t testing.TB, o FairQueueOptions[K]) *FairQueue[K, T] {
	t.Helper()
	q, err := NewFairQueue[K, T](o)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// refQueue is deficit round robin written the plain way, with slices, to
// check FairQueue against: a ring of tenants in the order they started
// waiting, a newcomer placed just before the one being served.
type refQueue struct {
	ring    []string
	fifo    map[string][]refItem
	weight  func(string) int
	cur     int
	credit  int
	maxWait int64
	total   int
	per     int
}

type refItem struct {
	v        int
	deadline int64
	seq      int
}

func (r *refQueue) len() int {
	n := 0
	for _, f := range r.fifo {
		n += len(f)
	}
	return n
}

// longest returns the most items one tenant has waiting.
func (r *refQueue) longest() int {
	n := 0
	for _, f := range r.fifo {
		n = max(n, len(f))
	}
	return n
}

func (r *refQueue) push(k string, v int, now int64, seq int) error {
	if len(r.fifo[k]) >= r.per {
		return ErrTenantFull
	}
	if r.len() >= r.total {
		return ErrQueueFull
	}
	d := int64(math.MaxInt64)
	if r.maxWait > 0 {
		d = now + r.maxWait
	}
	if len(r.fifo[k]) == 0 {
		if len(r.ring) == 0 {
			r.ring, r.cur, r.credit = []string{k}, 0, r.weight(k)
		} else {
			r.ring = slices.Insert(r.ring, r.cur, k)
			r.cur++
		}
	}
	r.fifo[k] = append(r.fifo[k], refItem{v, d, seq})
	return nil
}

// drop takes the front item of tenant k (or the one with seq) out.
func (r *refQueue) drop(k string, seq int) {
	f := r.fifo[k]
	i := slices.IndexFunc(f, func(it refItem) bool { return it.seq == seq })
	r.fifo[k] = slices.Delete(f, i, i+1)
	if len(r.fifo[k]) > 0 {
		return
	}
	delete(r.fifo, k)
	j := slices.Index(r.ring, k)
	r.ring = slices.Delete(r.ring, j, j+1)
	switch {
	case len(r.ring) == 0:
		r.cur = 0
	case j < r.cur:
		r.cur--
	case j == r.cur:
		r.cur %= len(r.ring)
		r.credit = r.weight(r.ring[r.cur])
	}
}

func (r *refQueue) expire(now int64) (out []int) {
	if r.maxWait == 0 {
		return nil
	}
	for {
		best, bk := -1, ""
		for k, f := range r.fifo {
			if f[0].deadline <= now && (best < 0 || f[0].seq < best) {
				best, bk = f[0].seq, k
			}
		}
		if best < 0 {
			return out
		}
		out = append(out, r.fifo[bk][0].v)
		r.drop(bk, best)
	}
}

func (r *refQueue) pop(now int64) (v int, expired []int, ok bool) {
	expired = r.expire(now)
	if len(r.ring) == 0 {
		return 0, expired, false
	}
	k := r.ring[r.cur]
	it := r.fifo[k][0]
	r.credit--
	r.drop(k, it.seq)
	if len(r.ring) > 0 && r.ring[r.cur] == k && r.credit <= 0 {
		r.cur = (r.cur + 1) % len(r.ring)
		r.credit = r.weight(r.ring[r.cur])
	}
	return it.v, expired, true
}

// FairQueue serves, expires and refuses exactly as deficit round robin
// does, on random pushes (from 6 tenants of weights 1 to 3), pops,
// expiries, removals and removals of the longest backlog's newest; every
// item leaves exactly once, and Longest is the longest backlog.
func TestFairQueueMatchesDRR(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(17, 19))
	for c := range 200 {
		weight := func(k string) int { return 1 + int(k[0]-'a')%3 }
		o := FairQueueOptions[string]{Total: 1 + rng.IntN(30), Weight: weight}
		o.PerTenant = 1 + rng.IntN(o.Total)
		if rng.IntN(2) == 0 {
			o.MaxWait = time.Duration(1+rng.IntN(50)) * time.Millisecond
		}
		q := newFQ[string, int](t, o)
		ref := &refQueue{fifo: map[string][]refItem{}, weight: weight, maxWait: int64(o.MaxWait), total: o.Total, per: o.PerTenant}
		now, seq := int64(1e12), 0
		tickets := map[int]Ticket{}
		tenantOf := map[int]string{}
		left := map[int]bool{}
		for step := range 1500 {
			now += rng.Int64N(int64(5 * time.Millisecond))
			switch op := rng.IntN(10); {
			case op < 5:
				k := string(rune('a' + rng.IntN(6)))
				seq++
				tk, err := q.Push(k, seq, now)
				if rerr := ref.push(k, seq, now, seq); !errors.Is(err, rerr) || (err == nil) != (rerr == nil) {
					t.Fatalf("case %d step %d: push %s: %v, want %v", c, step, k, err, rerr)
				}
				if err == nil {
					tickets[seq], tenantOf[seq] = tk, k
				}
			case op < 9:
				var got []int
				v, ok := q.Pop(now, func(x int) { got = append(got, x) })
				rv, rexp, rok := ref.pop(now)
				if ok != rok || (ok && v != rv) || !slices.Equal(got, rexp) {
					t.Fatalf("case %d step %d: pop %v %v expired %v, want %v %v expired %v", c, step, v, ok, got, rv, rok, rexp)
				}
				for _, x := range append(got, v) {
					if left[x] && ok {
						t.Fatalf("case %d: item %d left twice", c, x)
					}
					left[x] = true
				}
			case op == 9 && rng.IntN(3) == 0:
				v, ok := q.RemoveNewestOfLongest()
				most := ref.longest()
				if ok != (most > 0) {
					t.Fatalf("case %d step %d: RemoveNewestOfLongest took %v with a longest backlog of %d", c, step, ok, most)
				}
				if !ok {
					continue
				}
				k := tenantOf[v]
				f := ref.fifo[k]
				newest := slices.MaxFunc(f, func(a, b refItem) int { return a.seq - b.seq })
				if len(f) != most || newest.v != v {
					t.Fatalf("case %d step %d: RemoveNewestOfLongest took %d of %s (%d waiting); want the newest of a tenant with %d", c, step, v, k, len(f), most)
				}
				left[v] = true
				ref.drop(k, v)
			default:
				if seq == 0 {
					continue
				}
				x := 1 + rng.IntN(seq)
				tk, pushed := tickets[x]
				v, ok := q.Remove(tk)
				want := pushed && !left[x]
				if ok != want || (ok && v != x) {
					t.Fatalf("case %d step %d: remove %d: %v %v, want %v", c, step, x, v, ok, want)
				}
				if ok {
					left[x] = true
					ref.drop(tenantOf[x], x)
				}
			}
			if q.Len() != ref.len() || q.Tenants() != len(ref.ring) || q.Longest() != ref.longest() {
				t.Fatalf("case %d step %d: %d items of %d tenants, the longest %d; want %d of %d, %d", c, step, q.Len(), q.Tenants(), q.Longest(), ref.len(), len(ref.ring), ref.longest())
			}
		}
	}
}

// One tenant offering 20 times its share (10 tenants, a server taking one
// item a millisecond: its share is 100 a second, it offers 2000) does not
// take the others' turns: every item of another tenant is served after at
// most one of the heavy tenant's for each of its own items ahead of it (one
// round), none is refused, and their goodput is what they get alone. The
// same traffic through one FIFO loses most of theirs.
func TestFairQueueHeavyTenant(t *testing.T) {
	t.Parallel()
	type req struct {
		tenant  int
		at      int64
		ahead   int // items of its tenant ahead of it when pushed
		heavyAt int // heavy items popped before it was pushed
	}
	run := func(fair, heavy bool) (served, refused []int, worstWait time.Duration, err error) {
		q, err := NewFairQueue[int, req](FairQueueOptions[int]{Total: 256, PerTenant: 32})
		if err != nil {
			return nil, nil, 0, err
		}
		rng := rand.New(rand.NewPCG(23, 29))
		served, refused = make([]int, 10), make([]int, 10)
		heavyPopped := 0
		rate := []float64{2000, 50, 50, 50, 50, 50, 50, 50, 50, 50} // per second
		if !heavy {
			rate[0] = 0
		}
		total := 0.0
		for _, r := range rate {
			total += r
		}
		next, pop := int64(0), int64(time.Millisecond)
		for now := int64(0); now < int64(20*time.Second); {
			if next < pop {
				now = next
				next += 1 + int64(rng.ExpFloat64()/total*1e9)
				u, k := rng.Float64()*total, 0
				for u >= rate[k] {
					u -= rate[k]
					k++
				}
				key := k
				if !fair {
					key = 0
				}
				if _, err := q.Push(key, req{k, now, q.TenantLen(key), heavyPopped}, now); err != nil {
					refused[k]++
				}
				continue
			}
			now = pop
			pop += int64(time.Millisecond)
			r, ok := q.Pop(now, nil)
			if !ok {
				continue
			}
			served[r.tenant]++
			if r.tenant == 0 {
				heavyPopped++
				continue
			}
			worstWait = max(worstWait, time.Duration(now-r.at))
			if fair && heavyPopped-r.heavyAt > r.ahead+1 {
				return nil, nil, 0, fmt.Errorf("an item of tenant %d with %d ahead waited for %d heavy items", r.tenant, r.ahead, heavyPopped-r.heavyAt)
			}
		}
		return served, refused, worstWait, nil
	}
	served, refused, wait, err := run(true, true)
	if err != nil {
		t.Fatal(err)
	}
	alone, _, aloneWait, err := run(true, false)
	if err != nil {
		t.Fatal(err)
	}
	fifo, fifoRefused, fifoWait, err := run(false, true)
	if err != nil {
		t.Fatal(err)
	}
	var light, lightAlone, lightFIFO int
	for k := 1; k < 10; k++ {
		if refused[k] != 0 {
			t.Errorf("tenant %d: %d items refused", k, refused[k])
		}
		light, lightAlone, lightFIFO = light+served[k], lightAlone+alone[k], lightFIFO+fifo[k]
	}
	if ratio := float64(light) / float64(lightAlone); ratio < 0.99 {
		t.Errorf("the light tenants' goodput is %.3f of theirs alone", ratio)
	}
	if ratio := float64(lightFIFO) / float64(lightAlone); ratio > 0.5 {
		t.Errorf("through one FIFO the light tenants kept %.3f of their goodput: the scenario does not overload", ratio)
	}
	// Worst wait: at most a round of 10 tenants per item ahead; they rarely
	// have more than two waiting.
	if wait > 40*time.Millisecond {
		t.Errorf("a light tenant's item waited %v", wait)
	}
	t.Logf("fair: light served %d (alone %d), worst wait %v (alone %v), heavy served %d refused %d; one FIFO: light served %d, refused %d, worst wait %v",
		light, lightAlone, wait, aloneWait, served[0], refused[0], lightFIFO, sumInts(fifoRefused[1:]), fifoWait)
}

func sumInts(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

// Weights set the share of the turns: with tenants of weights 1, 2 and 3
// all backlogged, each round serves them 1, 2 and 3 items, in the order
// they started waiting.
func TestFairQueueWeights(t *testing.T) {
	q := newFQ[string, string](t, FairQueueOptions[string]{Total: 300, PerTenant: 100,
		Weight: func(k string) int { return map[string]int{"a": 1, "b": 2, "c": 3}[k] }})
	for i := range 60 {
		for _, k := range []string{"a", "b", "c"} {
			if _, err := q.Push(k, k, int64(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var got strings.Builder
	for range 12 {
		v, _ := q.Pop(100, nil)
		got.WriteString(v)
	}
	if got.String() != "abbcccabbccc" {
		t.Errorf("served %s, want abbcccabbccc", got.String())
	}
}

// Memory is bounded whatever the number of tenants: 200,000 distinct
// tenants pass through a queue of 64, and the items, the tenant records and
// the map never hold more than 64, and nothing once it is empty.
func TestFairQueueForgetsIdleTenants(t *testing.T) {
	q := newFQ[uint64, int](t, FairQueueOptions[uint64]{Total: 64, PerTenant: 4, MaxWait: time.Second})
	rng := rand.New(rand.NewPCG(31, 37))
	now := int64(0)
	for i := range 200_000 {
		now += int64(time.Microsecond)
		if _, err := q.Push(uint64(i), i, now); err != nil && !errors.Is(err, ErrQueueFull) {
			t.Fatal(err)
		}
		if rng.IntN(3) != 0 {
			q.Pop(now, nil)
		}
		if q.Len() > 64 || q.Tenants() > 64 || len(q.index) > 64 || cap(q.nodes) > 64 || cap(q.tenants) > 64 {
			t.Fatalf("after %d tenants: %d items, %d tenants, map %d, pools %d and %d", i, q.Len(), q.Tenants(), len(q.index), cap(q.nodes), cap(q.tenants))
		}
	}
	for {
		if _, ok := q.Pop(now, nil); !ok {
			break
		}
	}
	if q.Len() != 0 || q.Tenants() != 0 || len(q.index) != 0 {
		t.Errorf("drained: %d items, %d tenants, map %d", q.Len(), q.Tenants(), len(q.index))
	}
}

// Items that waited MaxWait are handed to the caller, oldest first, and
// never popped; a removed item, and a stale ticket, are gone.
func TestFairQueueExpiry(t *testing.T) {
	ms := int64(time.Millisecond)
	q := newFQ[string, int](t, FairQueueOptions[string]{Total: 10, PerTenant: 5, MaxWait: 100 * time.Millisecond})
	q.Push("a", 1, 0)
	q.Push("b", 2, 10*ms)
	tk, _ := q.Push("a", 3, 20*ms)
	q.Push("c", 4, 150*ms)
	var expired []int
	if k := q.Expire(99*ms, func(x int) { expired = append(expired, x) }); k != 0 {
		t.Errorf("expired %d before the deadline", k)
	}
	if v, ok := q.Remove(tk); !ok || v != 3 {
		t.Errorf("remove: %v %v", v, ok)
	}
	if _, ok := q.Remove(tk); ok {
		t.Error("removed twice")
	}
	if _, ok := q.Remove(Ticket{}); ok {
		t.Error("the zero ticket removed something")
	}
	v, ok := q.Pop(110*ms, func(x int) { expired = append(expired, x) })
	if !ok || v != 4 || !slices.Equal(expired, []int{1, 2}) {
		t.Errorf("pop at 110ms: %v %v, expired %v; want 4, expired [1 2]", v, ok, expired)
	}
	if q.Len() != 0 || q.Tenants() != 0 {
		t.Errorf("left %d items of %d tenants", q.Len(), q.Tenants())
	}
	// A ticket of a node reused by a later push names nothing.
	tk2, _ := q.Push("d", 5, 200*ms)
	if _, ok := q.Remove(tk); ok || tk2 == tk {
		t.Error("a stale ticket removed a later item")
	}
}

func TestFairQueueErrors(t *testing.T) {
	q := newFQ[string, int](t, FairQueueOptions[string]{Total: 3, PerTenant: 2})
	if _, err := q.Push("a", 1, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Push("a", 2, 9); !errors.Is(err, floodgate.ErrTimeBackwards) {
		t.Errorf("time backwards: %v", err)
	}
	q.Push("a", 2, 10)
	if _, err := q.Push("a", 3, 10); !errors.Is(err, ErrTenantFull) || !strings.HasPrefix(err.Error(), "algo: fair queue: ") {
		t.Errorf("tenant full: %v", err)
	}
	q.Push("b", 3, 10)
	if _, err := q.Push("c", 4, 10); !errors.Is(err, ErrQueueFull) {
		t.Errorf("queue full: %v", err)
	}
	if q.Len() != 3 || q.TenantLen("a") != 2 || q.TenantLen("c") != 0 {
		t.Errorf("a refused push changed the queue: %d items, a has %d", q.Len(), q.TenantLen("a"))
	}
	for _, o := range []FairQueueOptions[string]{{Total: -1}, {PerTenant: -1}, {MaxWait: -1}, {Total: 4, PerTenant: 5}, {Total: math.MaxInt32 + 1}} {
		if _, err := NewFairQueue[string, int](o); !errors.Is(err, floodgate.ErrInvalidLimit) || !strings.HasPrefix(err.Error(), "algo: fair queue: ") {
			t.Errorf("%+v: %v", o, err)
		}
	}
	if o := newFQ[string, int](t, FairQueueOptions[string]{}).Options(); o.Total != 1024 || o.PerTenant != 128 {
		t.Errorf("defaults: %+v", o)
	}
	if q := newFQ[string, int](t, FairQueueOptions[string]{MaxWait: time.Hour}); true {
		q.Push("a", 1, math.MaxInt64-10) // a deadline past the end of time saturates
		if k := q.Expire(math.MaxInt64-1, nil); k != 0 {
			t.Errorf("expired %d items with a saturated deadline", k)
		}
	}
}

func TestFairQueueNoAllocs(t *testing.T) {
	q := newFQ[int, int](t, FairQueueOptions[int]{Total: 256, PerTenant: 16, MaxWait: time.Second})
	now, i := int64(0), 0
	step := func() {
		now += int64(time.Microsecond)
		i++
		q.Push(i%100, i, now)
		if i%3 != 0 {
			q.Pop(now, nil)
		}
	}
	for range 10_000 { // the pools and the map grow to their peak
		step()
	}
	if a := testing.AllocsPerRun(10_000, step); a != 0 {
		t.Errorf("%v allocations per push and pop", a)
	}
}

// BenchmarkFairQueue measures a push and a pop, 100 tenants taking turns.
func BenchmarkFairQueue(b *testing.B) {
	q, _ := NewFairQueue[int, int](FairQueueOptions[int]{Total: 1024, PerTenant: 64, MaxWait: time.Second})
	now, i := int64(0), 0
	for range 512 {
		i++
		q.Push(i%100, i, now)
	}
	b.ReportAllocs()
	for b.Loop() {
		now += int64(time.Microsecond)
		i++
		q.Push(i%100, i, now)
		q.Pop(now, nil)
	}
}

// RemoveNewest takes out the item pushed last, whatever its tenant, and
// the rest are served as before, in turn.
func TestFairQueueRemoveNewest(t *testing.T) {
	q := newFQ[string, int](t, FairQueueOptions[string]{Total: 4, PerTenant: 4})
	if _, ok := q.RemoveNewest(); ok {
		t.Fatal("RemoveNewest on an empty queue took something")
	}
	for i, k := range []string{"a", "a", "b", "a"} {
		if _, err := q.Push(k, i, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if v, ok := q.RemoveNewest(); !ok || v != 3 {
		t.Fatalf("RemoveNewest = %d, %v; want 3 (the last pushed)", v, ok)
	}
	if v, ok := q.RemoveNewest(); !ok || v != 2 {
		t.Fatalf("RemoveNewest = %d, %v; want 2", v, ok)
	}
	if q.Len() != 2 || q.Tenants() != 1 || q.TenantLen("b") != 0 {
		t.Fatalf("len %d, tenants %d, b %d; want 2, 1, 0", q.Len(), q.Tenants(), q.TenantLen("b"))
	}
	var got []int
	for {
		v, ok := q.Pop(10, nil)
		if !ok {
			break
		}
		got = append(got, v)
	}
	if !slices.Equal(got, []int{0, 1}) {
		t.Errorf("served %v after the removals, want [0 1]", got)
	}
}

// RemoveNewestOfLongest takes out the newest item of the tenant with the
// most waiting, also after its oldest was passed over to the end of its
// line, and Longest follows the backlogs down as they level.
func TestFairQueueRemoveNewestOfLongest(t *testing.T) {
	q := newFQ[string, int](t, FairQueueOptions[string]{Total: 8, PerTenant: 8})
	if _, ok := q.RemoveNewestOfLongest(); ok || q.Longest() != 0 {
		t.Fatalf("an empty queue: took %v, longest %d", ok, q.Longest())
	}
	for i, k := range []string{"a", "a", "b", "a", "a", "b"} {
		if _, err := q.Push(k, i, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if q.Longest() != 4 {
		t.Fatalf("Longest = %d, want 4 (a's)", q.Longest())
	}
	q.PassOver() // a's line is now 1, 3, 4, 0: 0 is at its end, 4 is its newest
	if v, ok := q.RemoveNewestOfLongest(); !ok || v != 4 {
		t.Fatalf("RemoveNewestOfLongest = %d, %v; want 4 (a's newest, not 0 passed over)", v, ok)
	}
	if v, ok := q.RemoveNewestOfLongest(); !ok || v != 3 || q.Longest() != 2 {
		t.Fatalf("RemoveNewestOfLongest = %d, %v, then longest %d; want 3 and 2", v, ok, q.Longest())
	}
	var got []int
	for {
		v, ok := q.Pop(10, nil)
		if !ok {
			break
		}
		got = append(got, v)
	}
	if !slices.Equal(got, []int{2, 1, 5, 0}) || q.Longest() != 0 {
		t.Errorf("served %v, longest %d after; want [2 1 5 0], 0", got, q.Longest())
	}
}

// PassOver sends the item whose turn it is to the end of its tenant's
// FIFO and the turn to the next tenant; the item keeps its Ticket, its
// deadline and its age, so RemoveNewest still takes the last pushed.
func TestFairQueuePassOver(t *testing.T) {
	q := newFQ[string, int](t, FairQueueOptions[string]{Total: 8, PerTenant: 4, MaxWait: 10})
	q.PassOver() // nothing waits: nothing happens
	if _, ok := q.Next(0, nil); ok {
		t.Fatal("Next on an empty queue returned an item")
	}
	tickets := map[int]Ticket{}
	for i, k := range []string{"a", "a", "b", "c"} {
		tk, err := q.Push(k, i, int64(i))
		if err != nil {
			t.Fatal(err)
		}
		tickets[i] = tk
	}
	if v, ok := q.Next(4, nil); !ok || v != 0 {
		t.Fatalf("Next = %d, %v; want 0", v, ok)
	}
	q.PassOver() // a's FIFO is now 1, 0; b's turn
	if v, ok := q.Next(4, nil); !ok || v != 2 {
		t.Fatalf("Next after PassOver = %d, %v; want 2 (b's turn)", v, ok)
	}
	if v, ok := q.Pop(4, nil); !ok || v != 2 {
		t.Fatalf("Pop = %d, %v; want 2", v, ok)
	}
	if v, ok := q.RemoveNewest(); !ok || v != 3 {
		t.Fatalf("RemoveNewest = %d, %v; want 3 (the last pushed, not the one passed over)", v, ok)
	}
	if v, ok := q.Next(4, nil); !ok || v != 1 {
		t.Fatalf("Next = %d, %v; want 1 (a's FIFO after the pass)", v, ok)
	}
	var expired []int
	if n := q.Expire(10, func(v int) { expired = append(expired, v) }); n != 1 || !slices.Equal(expired, []int{0}) {
		t.Fatalf("Expire at 10 took %d (%v), want [0]: the item passed over keeps its deadline", n, expired)
	}
	if _, ok := q.Remove(tickets[0]); ok {
		t.Fatal("Remove of an expired item's Ticket took something")
	}
	if v, ok := q.Remove(tickets[1]); !ok || v != 1 {
		t.Fatalf("Remove(ticket of 1) = %d, %v; want 1", v, ok)
	}
	if q.Len() != 0 || q.Tenants() != 0 {
		t.Fatalf("len %d, tenants %d after all left; want 0, 0", q.Len(), q.Tenants())
	}
	// A tenant alone keeps the turn; its FIFO rotates.
	for i := range 3 {
		if _, err := q.Push("a", 10+i, 20); err != nil {
			t.Fatal(err)
		}
	}
	q.PassOver()
	var got []int
	for {
		v, ok := q.Pop(20, nil)
		if !ok {
			break
		}
		got = append(got, v)
	}
	if !slices.Equal(got, []int{11, 12, 10}) {
		t.Errorf("served %v after passing a lone tenant's first over, want [11 12 10]", got)
	}
}

// Next and PassOver allocate nothing.
func TestFairQueuePassOverNoAllocs(t *testing.T) {
	q := newFQ[int, int](t, FairQueueOptions[int]{Total: 256, PerTenant: 16, MaxWait: time.Second})
	now, i := int64(0), 0
	step := func() {
		now += int64(time.Microsecond)
		i++
		q.Push(i%100, i, now)
		if _, ok := q.Next(now, nil); ok && i%2 == 0 {
			q.PassOver()
		}
		if i%3 != 0 {
			q.Pop(now, nil)
		}
	}
	for range 10_000 {
		step()
	}
	if a := testing.AllocsPerRun(10_000, step); a != 0 {
		t.Errorf("%v allocations per push, pass and pop", a)
	}
}

package dashboard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// bucket is a limit of 10 a second named name.
func bucket(name string) floodgate.Limit {
	return floodgate.Limit{Name: name, Algorithm: floodgate.TokenBucket, Rate: 10, Per: time.Second, Burst: 10}
}

// decide tells rec about one request on the rules, denied by the second
// when deny is set.
func decide(rec *Recorder, rules []*limiter.Rule, key string, deny bool) {
	req := &limiter.Request{}
	res := &limiter.Result{Allowed: !deny, Binding: -1}
	for _, r := range rules {
		req.Hits = append(req.Hits, limiter.Hit{Rule: r, Key: key, Cost: 1})
		res.Decisions = append(res.Decisions, floodgate.Decision{Allowed: true})
	}
	if deny {
		res.Binding = 1
		res.Decisions[1].Allowed = false
	}
	rec.ObserveDecision(req, res)
}

func TestRecorderSeconds(t *testing.T) {
	t.Parallel()
	a, b := ruletest.Rule(t, bucket("a")), ruletest.Rule(t, bucket("b"))
	rec := NewRecorder(1000)
	decide(rec, []*limiter.Rule{a, b}, "ip:1", false)
	decide(rec, []*limiter.Rule{a, b}, "ip:1", true)
	rec.Tick(1001)
	decide(rec, []*limiter.Rule{a, b}, "ip:2", true)
	rec.ObserveDecision(&limiter.Request{Peek: true, Hits: []limiter.Hit{{Rule: a}}}, &limiter.Result{})
	got := rec.Counts(999, 1001)
	want := map[string][]Point{
		"all": {{2, 1}, {1, 1}},
		"a":   {{2, 0}, {1, 0}},
		"b":   {{2, 1}, {1, 1}},
	}
	for name, pts := range want {
		if fmt.Sprint(got[name]) != fmt.Sprint(pts) {
			t.Errorf("%s: %v, want %v", name, got[name], pts)
		}
	}
	// An hour later the old seconds are gone, not mixed into new ones.
	rec.Tick(1000 + Window)
	got = rec.Counts(1000+Window-2, 1000+Window)
	if fmt.Sprint(got["all"]) != "[{0 0} {0 0}]" {
		t.Errorf("after an hour: %v", got["all"])
	}
	if top := rec.Hitters().Top(5); len(top) != 2 || top[0].Limit != "b" {
		t.Errorf("top %v", top)
	}
}

func TestHittersFindHeavyKeys(t *testing.T) {
	t.Parallel()
	h := NewHitters(10)
	// 1,000 keys denied once each and three heavy ones denied often,
	// interleaved: the heavy ones are the top three.
	for i := 0; i < 1000; i++ {
		h.Add("l", fmt.Sprintf("ip:%d", i))
		if i%5 == 0 {
			h.Add("l", "heavy-1")
			h.Add("l", "heavy-2")
		}
		if i%4 == 0 {
			h.Add("l", "heavy-3")
		}
	}
	// Space-Saving guarantees every key denied more than total/k = 165
	// times: 200, 200 and 250 here. Count - Error <= true count <= Count.
	top := h.Top(3)
	truth := map[string]uint64{"heavy-1": 200, "heavy-2": 200, "heavy-3": 250}
	if len(top) != 3 {
		t.Fatalf("top %v", top)
	}
	for _, x := range top {
		n, ok := truth[x.Key]
		if !ok || x.Count-x.Error > n || x.Count < n {
			t.Errorf("%v: not a heavy key, or the bounds do not hold (true count %d)", x, n)
		}
	}
	if len(h.cur.heap) > 10 || len(h.cur.at) != len(h.cur.heap) {
		t.Errorf("sketch holds %d keys (%d indexed), more than 10", len(h.cur.heap), len(h.cur.at))
	}
}

// TestShareAcrossInstances: two recorders sharing one Redis see each
// other's counts.
func TestShareAcrossInstances(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	a := ruletest.Rule(t, bucket("a"))
	b := ruletest.Rule(t, bucket("b"))
	now := time.Now().Unix()
	var recs [2]*Recorder
	var shares [2]*Share
	for i := range recs {
		recs[i] = NewRecorder(now)
		c, err := redisconn.Open("redis://" + rs.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		id := fmt.Sprintf("i%d", i)
		shares[i] = NewShare(c, id, recs[i], func() Instance { return Instance{Version: "v1"} }, nil)
	}
	for i := 0; i < 3; i++ {
		decide(recs[0], []*limiter.Rule{a, b}, "ip:1", false)
	}
	decide(recs[1], []*limiter.Rule{a, b}, "ip:9", true)
	for _, r := range recs {
		r.Tick(now + 1)
	}
	ctx := context.Background()
	for round := 0; round < 2; round++ {
		for _, s := range shares {
			if err := s.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, s := range shares {
		local := recs[i].Counts(now-1, now)
		s.addRemote(local, now-1, now)
		if got := local["all"][0]; got != (Point{Decisions: 4, Denied: 1}) {
			t.Errorf("instance %d sees %v for the deployment, want 4 decisions and 1 denial", i, got)
		}
		if n := len(s.Instances()); n != 2 {
			t.Errorf("instance %d sees %d instances", i, n)
		}
	}
	if top := shares[0].Top(); len(top) != 1 || top[0].Key != "ip:9" {
		t.Errorf("instance 0 sees the other's top keys as %v", top)
	}
}

func BenchmarkObserveDecision(b *testing.B) {
	rules := []*limiter.Rule{ruletest.Rule(b, bucket("a")), ruletest.Rule(b, bucket("b")), ruletest.Rule(b, bucket("c"))}
	rec := NewRecorder(time.Now().Unix())
	req := &limiter.Request{}
	res := &limiter.Result{Allowed: true, Binding: -1}
	for _, r := range rules {
		req.Hits = append(req.Hits, limiter.Hit{Rule: r, Key: "ip:1", Cost: 1})
		res.Decisions = append(res.Decisions, floodgate.Decision{Allowed: true})
	}
	rec.ObserveDecision(req, res)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rec.ObserveDecision(req, res)
		}
	})
}

// TestHittersBoundsUnderChurn checks the Space-Saving bounds on streams
// where far more keys than counters are denied (a flood from many
// addresses, every new key taking the smallest counter's place), against
// the true counts: the counts sum to the 429s, each kept key's count
// bounds its true count from above and count - error from below, and
// every key denied more than total/k times is kept.
func TestHittersBoundsUnderChurn(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 11))
	for round := 0; round < 20; round++ {
		k := 1 + rng.IntN(40)
		h := NewHitters(k)
		truth := map[string]uint64{}
		total := 0
		n := 500 + rng.IntN(5000)
		heavy := 1 + rng.IntN(5)
		for i := 0; i < n; i++ {
			var key string
			if rng.IntN(4) == 0 {
				key = fmt.Sprintf("heavy-%d", rng.IntN(heavy))
			} else {
				key = fmt.Sprintf("ip:%d", rng.IntN(100000))
			}
			h.Add("l", key)
			truth[key]++
			total++
		}
		h.mu.Lock()
		h.flush()
		h.mu.Unlock()
		var sum uint64
		for i, s := range h.cur.heap {
			sum += s.count
			if at := h.cur.at[s.key]; at != s || s.pos != i {
				t.Fatalf("round %d: %v at %d is indexed at %d", round, s.key, i, s.pos)
			}
			if i > 0 && h.cur.heap[(i-1)/2].count > s.count {
				t.Fatalf("round %d: the heap's order breaks at %d", round, i)
			}
		}
		if sum != uint64(total) || len(h.cur.heap) > k || len(h.cur.at) != len(h.cur.heap) {
			t.Fatalf("round %d: counts sum to %d of %d 429s, %d kept (%d indexed) of at most %d",
				round, sum, total, len(h.cur.heap), len(h.cur.at), k)
		}
		kept := map[string]bool{}
		for _, x := range h.Top(k) {
			kept[x.Key] = true
			if n := truth[x.Key]; x.Count < n || x.Count-x.Error > n {
				t.Errorf("round %d: %+v does not bound its true count %d", round, x, n)
			}
		}
		for key, n := range truth {
			if n*uint64(k) > uint64(total) && !kept[key] {
				t.Errorf("round %d: %s denied %d of %d times (k=%d) is not kept", round, key, n, total, k)
			}
		}
	}
}

// TestHittersCountEveryRun: runs of one key held on each CPU (longer than
// a front holds, broken by other keys, from goroutines on every CPU) all
// reach the sketch, and a read while they are counted sees every 429
// counted before it.
func TestHittersCountEveryRun(t *testing.T) {
	t.Parallel()
	h := NewHitters(DefaultHitters)
	const goroutines, each = 8, 3 * frontRun
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				key := "ip:flood"
				if i%1000 == 999 {
					key = fmt.Sprintf("ip:%d", g)
				}
				h.Add("per-ip", key)
			}
		})
	}
	h.Add("per-ip", "ip:before")
	if top := h.Top(DefaultHitters); len(top) == 0 || !slices.ContainsFunc(top, func(x Hitter) bool { return x.Key == "ip:before" }) {
		t.Errorf("a 429 counted before the read is missing from it: %v", top)
	}
	wg.Wait()
	got := map[string]uint64{}
	for _, x := range h.Top(DefaultHitters) {
		if x.Error != 0 {
			t.Errorf("%+v: an overcount with fewer keys than counters", x)
		}
		got[x.Key] = x.Count
	}
	per := uint64(each / 1000)
	if got["ip:flood"] != goroutines*(each-per) || got["ip:3"] != per || got["ip:before"] != 1 {
		t.Errorf("counted %v, want ip:flood %d, each ip:N %d", got, goroutines*(each-per), per)
	}
}

// TestHittersFloodAllocatesNothing: a key taking another's place takes its
// counter, so a flood of new keys allocates nothing.
func TestHittersFloodAllocatesNothing(t *testing.T) {
	h := NewHitters(DefaultHitters)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("ip:%d", i)
	}
	i := 0
	if a := testing.AllocsPerRun(5000, func() { h.Add("l", keys[i%len(keys)]); i++ }); a != 0 {
		t.Errorf("a 429 of a new key allocates %.1f times", a)
	}
}

// BenchmarkHitters: a 429 counted in the sketch, from one key and from a
// flood of keys far more than the sketch keeps.
func BenchmarkHitters(b *testing.B) {
	keys := make([]string, 100000)
	for i := range keys {
		keys[i] = fmt.Sprintf("ip:10.%d.%d.%d", i>>16, i>>8&255, i&255)
	}
	b.Run("one-key", func(b *testing.B) {
		h := NewHitters(DefaultHitters)
		for b.Loop() {
			h.Add("per-ip", keys[0])
		}
	})
	b.Run("many-keys", func(b *testing.B) {
		h := NewHitters(DefaultHitters)
		i := 0
		for b.Loop() {
			h.Add("per-ip", keys[i%len(keys)])
			i++
		}
	})
	// One key flooding through every CPU at once (-cpu 2 and up).
	b.Run("one-key-parallel", func(b *testing.B) {
		h := NewHitters(DefaultHitters)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				h.Add("per-ip", keys[0])
			}
		})
	})
}

// TestRecorderFoldsEveryDecision counts from eight goroutines while the
// clock ticks through ten seconds: every decision, 429, degraded decision
// and store latency lands in exactly one second, the current second's
// decisions are read as they are counted, and its health once it ends.
func TestRecorderFoldsEveryDecision(t *testing.T) {
	t.Parallel()
	a := ruletest.Rule(t, bucket("a"))
	rec := NewRecorder(1000)
	req := &limiter.Request{Hits: []limiter.Hit{{Rule: a, Key: "ip:1", Cost: 1}}}
	denied := &limiter.Result{Binding: 0, Degraded: limiter.DegradedDeadline, StoreLatency: 3 * time.Millisecond,
		Decisions: []floodgate.Decision{{}}}
	const goroutines, each = 8, 5000
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				rec.ObserveDecision(req, denied)
			}
		})
	}
	for now := int64(1001); now <= 1010; now++ {
		rec.Tick(now)
	}
	wg.Wait()
	var live uint64
	for _, p := range rec.Counts(999, 1010)["a"] {
		live += p.Decisions
	}
	if live != goroutines*each {
		t.Errorf("counted %d decisions with the current second's, want %d", live, goroutines*each)
	}
	rec.Tick(1011)
	var sum Point
	for _, p := range rec.Counts(999, 1010)["all"] {
		sum.Decisions += p.Decisions
		sum.Denied += p.Denied
	}
	if want := (Point{goroutines * each, goroutines * each}); sum != want {
		t.Errorf("the seconds hold %v, want %v", sum, want)
	}
	if p := rec.Counts(1010, 1011)["all"]; p[0] != (Point{}) {
		t.Errorf("the new second starts at %v", p[0])
	}
	h := rec.HealthOver(999, 1010)
	if h.Degraded != goroutines*each || h.Calls != goroutines*each || h.LatencyAvgMs != 3 || h.LatencyMaxMs != 3 {
		t.Errorf("health %+v, want %d degraded and calls of 3 ms", h, goroutines*each)
	}
}

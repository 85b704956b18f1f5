package algo_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
)

// A token bucket of 10 refilling 2 per second (seed 002's worked example):
// the state is one theoretical arrival time, the instant is passed in.
func Example() {
	limit := floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: 2, Per: time.Second, Burst: 10}
	p, err := algo.Compile(&limit)
	if err != nil {
		panic(err)
	}
	var s algo.State // a fresh key: a full bucket
	for _, r := range []algo.Request{
		{Now: 0, Cost: 8},
		{Now: int64(2 * time.Second), Cost: 7},
		{Now: int64(2 * time.Second), Cost: 6},
	} {
		d, _ := p.Decide(&s, r)
		fmt.Printf("t=%v cost %d: allowed %v, %d left, retry after %v\n",
			time.Duration(r.Now), r.Cost, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// t=0s cost 8: allowed true, 2 left, retry after 0s
	// t=2s cost 7: allowed false, 6 left, retry after 500ms
	// t=2s cost 6: allowed true, 0 left, retry after 0s
}

// A cost above the capacity can never pass: it is an error of its own,
// with no RetryAfter.
func ExampleParams_Decide_neverFits() {
	limit := floodgate.Limit{Algorithm: floodgate.SlidingLog, Max: 10, Window: time.Minute}
	p, _ := algo.Compile(&limit)
	var s algo.State
	d, err := p.Decide(&s, algo.Request{Now: 0, Cost: 11})
	fmt.Println(d.Allowed, d.RetryAfter, errors.Is(err, floodgate.ErrNeverFits))
	// Output: false 0s true
}

// The leaky queue (NGINX limit_req burst=5 without nodelay) admits six
// simultaneous requests and tells how long to hold each one.
func ExampleParams_Decide_leakyQueue() {
	limit := floodgate.Limit{Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Second, Burst: 5}
	p, _ := algo.Compile(&limit)
	var s algo.State
	for range 7 {
		d, _ := p.Decide(&s, algo.Request{Now: 0, Cost: 1})
		fmt.Print(d.Allowed, " ", d.Delay, "; ")
	}
	fmt.Println()
	// Output: true 0s; true 1s; true 2s; true 3s; true 4s; true 5s; false 0s;
}

// A peek answers without charging.
func ExampleParams_Decide_peek() {
	limit := floodgate.Limit{Algorithm: floodgate.FixedWindow, Max: 3, Window: time.Second}
	p, _ := algo.Compile(&limit)
	var s algo.State
	d, _ := p.Decide(&s, algo.Request{Now: 0, Cost: 1, Peek: true})
	fmt.Println(d.Allowed, d.Remaining, s.B)
	// Output: true 2 0
}

// Concurrency leases are released exactly once; a second release is a no-op.
func ExampleParams_Release() {
	limit := floodgate.Limit{Algorithm: floodgate.Concurrency, Max: 1}
	p, _ := algo.Compile(&limit)
	var s algo.State
	a, _ := p.Decide(&s, algo.Request{Now: 0, Cost: 1, Lease: 1})
	b, _ := p.Decide(&s, algo.Request{Now: 1, Cost: 1, Lease: 2})
	_ = p.Release(&s, 2, 1)
	_ = p.Release(&s, 2, 1)
	c, _ := p.Decide(&s, algo.Request{Now: 3, Cost: 1, Lease: 3})
	fmt.Println(a.Allowed, b.Allowed, c.Allowed)
	// Output: true false true
}

// Quota periods follow the wall clock of the limit's time zone: the day of
// the spring DST change in Berlin has 23 hours.
func ExampleQuotaPeriod() {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	limit := floodgate.Limit{Algorithm: floodgate.Quota, Max: 1000, Period: floodgate.Day, Location: berlin}
	start, end := algo.QuotaPeriod(&limit, time.Date(2026, 3, 29, 12, 0, 0, 0, berlin).UnixNano())
	fmt.Println(time.Unix(0, start).In(berlin), "+", time.Duration(end-start))
	// Output: 2026-03-29 00:00:00 +0100 CET + 23h0m0s
}

// The local fallback of a global limit of 100 on 3 instances (seed 002's
// split_limit).
func ExampleSplitLimit() {
	fmt.Println(algo.SplitLimit(100, 3))
	// Output: 33
}

// An adaptive concurrency limit in front of an upstream that serves 8
// requests at once in 10ms and queues the rest: it learns the 8 from the
// latency alone, and saws just around it.
func ExampleAdaptive() {
	a, err := algo.NewAdaptive(algo.AdaptiveOptions{Initial: 2, Window: 50 * time.Millisecond, MinSamples: 10})
	if err != nil {
		panic(err)
	}
	now := int64(0)
	for round := range 400 {
		// Admit as many as the limit lets in; they answer together.
		n := 0
		for a.Acquire() {
			n++
		}
		rtt := 10 * time.Millisecond * time.Duration(max(n, 8)) / 8
		now += int64(rtt)
		for range n {
			if err := a.Release(now, rtt, algo.OutcomeOK); err != nil {
				panic(err)
			}
		}
		if round%50 == 49 {
			fmt.Print(a.Limit(), " ")
		}
	}
	fmt.Println("| no-load latency", a.NoLoadLatency())
	// Output: 6 9 8 9 8 8 7 9 | no-load latency 10ms
}

// Three tiers on a capacity of 10: critical keeps 20% from the others,
// default 30% from sheddable. With 5 in flight sheddable is refused, and
// the lowest tier is always the first refused.
func ExampleTiers() {
	tiers, err := algo.NewTiers(0.2, 0.3, 0) // critical, default, sheddable
	if err != nil {
		panic(err)
	}
	for t, name := range []string{"critical", "default", "sheddable"} {
		fmt.Printf("%s: admitted below %d in flight; with 5 in flight: %v\n",
			name, tiers.Ceiling(t, 10), tiers.Admit(t, 10, 5))
	}
	// Output:
	// critical: admitted below 10 in flight; with 5 in flight: true
	// default: admitted below 8 in flight; with 5 in flight: true
	// sheddable: admitted below 5 in flight; with 5 in flight: false
}

// A tenant with a backlog does not hold back the others: each tenant with
// items waiting is served in turn. Items that waited too long are handed
// back, to be answered, instead of being served.
func ExampleFairQueue() {
	q, err := algo.NewFairQueue[string, string](algo.FairQueueOptions[string]{
		Total: 100, PerTenant: 10, MaxWait: time.Second,
	})
	if err != nil {
		panic(err)
	}
	ms := int64(time.Millisecond)
	for i := range 4 {
		q.Push("heavy", fmt.Sprint("heavy-", i), 0)
	}
	q.Push("light", "light-0", 0)
	q.Push("light", "light-1", 0)
	expired := func(item string) { fmt.Println("expired:", item) }
	for range 4 {
		item, _ := q.Pop(100*ms, expired)
		fmt.Println("served:", item)
	}
	q.Push("late", "late-0", 500*ms)
	for {
		item, ok := q.Pop(1200*ms, expired)
		if !ok {
			break
		}
		fmt.Println("served:", item)
	}
	fmt.Println(q.Len(), q.Tenants())
	// Output:
	// served: heavy-0
	// served: light-0
	// served: heavy-1
	// served: light-1
	// expired: heavy-2
	// expired: heavy-3
	// served: late-0
	// 0 0
}

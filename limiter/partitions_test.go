package limiter

import (
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestPartitionsBounded: at most maxPartitions breakers are kept; past
// that, a new partition takes the place of one that is closed and saw no
// call for a window, and otherwise gets none (the caller then uses the
// shared breaker). The openings of a dropped breaker still count.
func TestPartitionsBounded(t *testing.T) {
	var clock atomic.Int64
	base := time.Unix(1000, 0)
	var shared breaker
	shared.init(BreakerOptions{Window: time.Second, Failures: 1}, 0,
		func() time.Time { return base.Add(time.Duration(clock.Load())) }, slog.New(slog.DiscardHandler))
	var p partitions
	name := func(i int) string { return "10.0.0." + strconv.Itoa(i) + ":6379" }
	for i := range maxPartitions {
		if p.get(name(i), &shared) == nil {
			t.Fatalf("partition %d of %d: no breaker", i, maxPartitions)
		}
	}
	if p.get(name(0), &shared) != p.get(name(0), &shared) {
		t.Fatal("a partition got two breakers")
	}
	if p.get("new", &shared) != nil {
		t.Fatal("a breaker past the bound while every one is new")
	}
	// A window later: the first opens, the second is left idle, the
	// others answer.
	clock.Store(int64(2 * time.Second))
	for i := range maxPartitions {
		b := p.get(name(i), &shared)
		switch i {
		case 0:
			b.failure(false, b.since(), nil)
		case 1:
		default:
			b.success(false, b.since())
		}
	}
	if open, opens := p.state(shared.since()); !open || opens != 1 {
		t.Fatalf("state %v, %d; want one open, opened once", open, opens)
	}
	if p.get("new", &shared) == nil {
		t.Fatal("no breaker past the bound with an idle one to drop")
	}
	m := *p.m.Load()
	if len(m) != maxPartitions || m[name(1)] != nil || m[name(0)] == nil || m["new"] == nil {
		t.Fatalf("%d breakers, idle kept %v, open kept %v; want the idle one dropped",
			len(m), m[name(1)] != nil, m[name(0)] != nil)
	}
	if p.get("newer", &shared) != nil {
		t.Fatal("a breaker past the bound while none is idle")
	}
	// The open one closes, and a window later is dropped in turn: its
	// opening still counts.
	m[name(0)].success(false, -1)
	clock.Add(int64(2 * time.Second))
	for i := 2; i < maxPartitions; i++ {
		p.get(name(i), &shared).success(false, shared.since())
	}
	p.get("new", &shared).success(false, shared.since())
	if p.get("newer", &shared) == nil {
		t.Fatal("no breaker for a new partition with the closed one idle")
	}
	if m := *p.m.Load(); m[name(0)] != nil {
		t.Fatal("the idle closed breaker was kept")
	}
	if open, opens := p.state(shared.since()); open || opens != 1 {
		t.Fatalf("state %v, %d; want none open, opened once", open, opens)
	}
}

// TestForsakenPartitionBreaker: an open breaker that no call meets for a
// window (its server left the slot map) counts as closed and makes room
// for another; one that calls still meet stays open.
func TestForsakenPartitionBreaker(t *testing.T) {
	var clock atomic.Int64
	base := time.Unix(1000, 0)
	var shared breaker
	shared.init(BreakerOptions{Window: time.Second, Failures: 1, ProbeInterval: 10 * time.Second}, 0,
		func() time.Time { return base.Add(time.Duration(clock.Load())) }, slog.New(slog.DiscardHandler))
	var p partitions
	old := p.get("old", &shared)
	old.failure(false, old.since(), nil)
	clock.Add(int64(900 * time.Millisecond))
	if call, _ := old.allow(); call {
		t.Fatal("open breaker let a call through within the probe interval")
	}
	clock.Add(int64(900 * time.Millisecond))
	if open, _ := p.state(shared.since()); !open || old.idle(shared.since()) {
		t.Fatal("a breaker met 0.9 s ago (window 1 s) counts as closed or idle")
	}
	clock.Add(int64(time.Second))
	if open, opens := p.state(shared.since()); open || opens != 1 || !old.idle(shared.since()) {
		t.Fatalf("state %v, %d, idle %v; want a breaker no call met for a window closed and idle",
			open, opens, old.idle(shared.since()))
	}
	if call, _ := old.allow(); call {
		t.Fatal("forsaken breaker let a call through within the probe interval")
	}
	if open, _ := p.state(shared.since()); !open {
		t.Fatal("a forsaken breaker a call met again counts as closed")
	}
}

// TestPartitionBreakerSharesTimeBase: a partition's breaker reads the
// instants of the shared one (call.sent and call.end are on its clock).
func TestPartitionBreakerSharesTimeBase(t *testing.T) {
	var clock atomic.Int64
	base := time.Unix(1000, 0)
	var shared breaker
	shared.init(BreakerOptions{}, time.Second, func() time.Time { return base.Add(time.Duration(clock.Load())) }, slog.New(slog.DiscardHandler))
	clock.Store(int64(time.Hour))
	var p partitions
	b := p.get("a", &shared)
	if b.since() != shared.since() || b.start != shared.start {
		t.Fatalf("partition clock %d, shared %d; want the same", b.since(), shared.since())
	}
}

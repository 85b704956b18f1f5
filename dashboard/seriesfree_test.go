package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// liveSeries returns how many limits have a series of their own in rec.
func liveSeries(rec *Recorder) int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.byName)
}

// TestIdleSeriesFreed: MaxSeries limits count a decision each and then
// nothing for an hour; their series are freed, so a limit with a new name
// gets a series of its own, and neither Counts nor the handler's list
// names the idle limits any more. A rule of a freed name that decides
// again (an old policy's rule finishing a request, or a limit that comes
// back) is counted under its name in a live series.
func TestIdleSeriesFreed(t *testing.T) {
	t.Parallel()
	const start = 1000
	rec := NewRecorder(start)
	old := make([]*limiter.Rule, MaxSeries)
	for i := range old {
		old[i] = ruletest.Rule(t, bucket(fmt.Sprintf("old-%03d", i)))
		decide(rec, []*limiter.Rule{old[i]}, "ip:1", false)
	}
	now := int64(start)
	tick := func(to int64) {
		for now < to {
			now++
			rec.Tick(now)
		}
	}
	tick(start + 1)
	if p := rec.Counts(start-1, start)["old-000"]; len(p) != 1 || p[0].Decisions != 1 {
		t.Fatalf("a limit's first second: %v, want 1 decision", p)
	}
	tick(start + Window + 2) // an hour of nothing: the old series show only zeros

	fresh := ruletest.Rule(t, bucket("new"))
	decide(rec, []*limiter.Rule{fresh}, "ip:1", false)
	got := rec.Counts(now-1, now)
	if p := got["new"]; len(p) != 1 || p[0].Decisions != 1 {
		t.Errorf("a limit named after %d limits idle for an hour: %v, other %v; want a series of its own with 1 decision",
			MaxSeries, p, got["other"])
	}
	var idle []string
	for name := range got {
		if strings.HasPrefix(name, "old-") {
			idle = append(idle, name)
		}
	}
	if len(idle) > 0 {
		t.Errorf("%d limits idle for an hour still have a series (%s, ...)", len(idle), slices.Min(idle))
	}
	if n := liveSeries(rec); n != 1 {
		t.Errorf("%d live series, want 1 (new)", n)
	}

	tick(now + 1)
	h := NewHandler(Options{Recorder: rec, Info: func() Instance { return Instance{ID: "i0"} }})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/ui/api/overview", nil))
	var ov struct{ Limits []string }
	if err := json.Unmarshal(w.Body.Bytes(), &ov); err != nil {
		t.Fatalf("overview: %v: %s", err, w.Body.Bytes())
	}
	if !slices.Equal(ov.Limits, []string{"new"}) {
		t.Errorf("the dashboard lists %d limits (%q ...), want [new]", len(ov.Limits), ov.Limits[:min(len(ov.Limits), 3)])
	}

	// A rule whose series was freed decides again: it gets a live series
	// under its name, on its first decision.
	for range 3 {
		decide(rec, []*limiter.Rule{old[7]}, "ip:1", false)
	}
	tick(now + 1)
	got = rec.Counts(now-2, now-1)
	if p := got["old-007"]; len(p) != 1 || p[0].Decisions != 3 {
		t.Errorf("a freed limit back again: %v, want its 3 decisions under its name (other %v)", p, got["other"])
	}
	if p := got["other"]; len(p) > 0 && p[0].Decisions != 0 {
		t.Errorf("other counted %v, want nothing", p)
	}
	if p := got["all"]; len(p) != 1 || p[0].Decisions != 3 {
		t.Errorf("all: %v, want 3 decisions", p)
	}
}

// TestReloadFloodKeepsSeriesBounded: 1,000 limit names, each in use for
// five seconds (a reload with renamed limits every five seconds, for 80
// minutes), while the rules of every name are kept: at no second are more
// than MaxSeries series live, and the slots of a freed series are let go
// although its rule still points to it. Once the flood's names have been
// idle an hour, the names in use have series of their own.
func TestReloadFloodKeepsSeriesBounded(t *testing.T) {
	t.Parallel()
	const start, names, each = 1000, 1000, 5
	rec := NewRecorder(start)
	now := int64(start)
	failed := false
	step := func(rules ...*limiter.Rule) {
		t.Helper()
		for _, r := range rules {
			decide(rec, []*limiter.Rule{r}, "ip:1", false)
		}
		now++
		rec.Tick(now)
		n, listed := liveSeries(rec), 0
		if now%60 == 0 {
			listed = len(rec.Counts(now-1, now))
		}
		if (n > MaxSeries || listed > MaxSeries+2) && !failed {
			failed = true
			t.Errorf("%d s on: %d live series, %d listed; want at most %d and %d", now-start, n, listed, MaxSeries, MaxSeries+2)
		}
	}
	type ring struct {
		name  string
		slots weak.Pointer[slot]
	}
	var rings []ring
	rules := make([]*limiter.Rule, 0, names)
	for i := range names {
		r := ruletest.Rule(t, bucket(fmt.Sprintf("flood-%04d", i)))
		rules = append(rules, r)
		for range each {
			step(r)
		}
		rec.mu.Lock()
		if s := rec.byName[r.Name()]; s != nil {
			rings = append(rings, ring{r.Name(), weak.Make(&s.slots[0])})
		}
		rec.mu.Unlock()
	}
	end := now
	steady := ruletest.Rule(t, bucket("steady"))
	for now < end+Window+2 {
		step(steady)
	}
	late := ruletest.Rule(t, bucket("late"))
	bad := 0
	for range 60 {
		step(steady, late)
		got := rec.Counts(now-2, now-1)
		for _, name := range []string{"steady", "late"} {
			if p := got[name]; (len(p) != 1 || p[0].Decisions != 1) && bad < 3 {
				bad++
				t.Errorf("%d s after the flood: %s counted %v, want its own series with 1 decision (other %v)",
					now-end, name, p, got["other"])
			}
		}
	}
	if n := liveSeries(rec); n != 2 {
		t.Errorf("an hour after the flood: %d live series, want 2 (steady, late)", n)
	}
	for range 5 {
		runtime.GC()
	}
	if len(rings) < MaxSeries {
		t.Fatalf("%d of the flood's names got a series, want at least %d", len(rings), MaxSeries)
	}
	var held []string
	for _, r := range rings {
		if r.slots.Value() != nil {
			held = append(held, r.name)
		}
	}
	if len(held) > 0 {
		t.Errorf("the slots of %d of the flood's %d series (%s, ...) are still held, an hour after their names were used",
			len(held), len(rings), held[0])
	}
	runtime.KeepAlive(rules)
}

// TestRemoteSeriesFreed: an instance with MaxSeries limits, one decision
// each, leaves; an hour later another instance's new limit gets a remote
// series of its own on this instance's dashboard, not "other", and the
// names the blobs stopped counting in for an hour are no longer listed.
// The remote series never outnumber MaxSeries limits, "all" and "other".
func TestRemoteSeriesFreed(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	now := time.Now().Unix()
	share := func(id string, rec *Recorder) *Share {
		c, err := redisconn.Open("redis://" + rs.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return NewShare(c, id, rec, func() Instance { return Instance{Version: "v1"} }, nil)
	}
	ctx := context.Background()
	syncAll := func(shares ...*Share) {
		t.Helper()
		for _, s := range shares {
			if err := s.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	here := NewRecorder(now)
	local := share("here", here)
	gone := NewRecorder(now)
	gs := share("gone", gone)
	for i := range MaxSeries {
		decide(gone, []*limiter.Rule{ruletest.Rule(t, bucket(fmt.Sprintf("gone-%03d", i)))}, "ip:1", false)
	}
	for k := int64(1); k <= 2; k++ {
		here.Tick(now + k)
		gone.Tick(now + k)
		syncAll(gs, local)
	}
	remote := func() int {
		local.mu.Lock()
		defer local.mu.Unlock()
		return len(local.remote)
	}
	if n := remote(); n != MaxSeries+1 {
		t.Fatalf("%d remote series after the other instance's decisions, want %d limits and all", n, MaxSeries)
	}

	// An hour later (the instance that left still has a blob in Redis, of
	// its last seconds), a new instance counts a limit of a new name.
	later := now + Window + 5
	here.Tick(later)
	next := NewRecorder(later)
	ns := share("next", next)
	decide(next, []*limiter.Rule{ruletest.Rule(t, bucket("next"))}, "ip:1", false)
	for k := int64(1); k <= ShareSeconds; k++ {
		here.Tick(later + k)
		next.Tick(later + k)
		syncAll(ns, local)
		if n := remote(); n > MaxSeries+2 {
			t.Fatalf("%d remote series, more than %d limits, all and other", n, MaxSeries)
		}
	}
	until := here.Now() - 1
	counts := here.Counts(until-Window, until)
	local.addRemote(counts, until-Window, until)
	sum := func(pts []Point) (d uint64) {
		for _, p := range pts {
			d += p.Decisions
		}
		return d
	}
	if d := sum(counts["next"]); d != 1 {
		t.Errorf("the new instance's new limit reads %d decisions, other %d; want its 1 decision in a series of its own",
			d, sum(counts["other"]))
	}
	var idle []string
	for name := range counts {
		if strings.HasPrefix(name, "gone-") {
			idle = append(idle, name)
		}
	}
	if len(idle) > 0 {
		t.Errorf("%d limits that no blob counted in for an hour are still listed (%s, ...)", len(idle), slices.Min(idle))
	}
}

// TestSeriesFreedWhileCounted: rules of three groups of names decide
// from two goroutines while the clock jumps on by half an hour at a time,
// a group a half hour (0, 1, 0, 2, ...): their series go idle, are marked
// and freed under them, and are asked for again (the first group's while
// marked, the others' once freed), while the counts are read. The race
// detector finds nothing, and no more than MaxSeries series are ever live.
// An hour after the last decision every series is freed, and the rules
// that kept them are counted under their names again.
func TestSeriesFreedWhileCounted(t *testing.T) {
	t.Parallel()
	const group = 100
	rules := make([]*limiter.Rule, 3*group)
	for i := range rules {
		rules[i] = ruletest.Rule(t, bucket(fmt.Sprintf("l-%03d", i)))
	}
	rec := NewRecorder(1000)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				half := rec.Now() / (Window / 2)
				first := [4]int{0, 1, 0, 2}[half%4] * group
				decide(rec, []*limiter.Rule{rules[first+(i/50+g*group/2)%group]}, "ip:1", false)
				if i%100 == 0 {
					runtime.Gosched()
				}
			}
		})
	}
	for k := int64(1); k <= 8; k++ {
		rec.Tick(1000 + k*Window/2)
		rec.Tick(1000 + k*Window/2 + 1)
		if n := liveSeries(rec); n > MaxSeries {
			t.Errorf("%d live series", n)
		}
		_ = rec.Counts(rec.Now()-5, rec.Now())
		time.Sleep(time.Millisecond)
	}
	close(done)
	wg.Wait()
	end := rec.Now()
	rec.Tick(end + Window + 1)
	rec.Tick(end + Window + 2)
	if n := liveSeries(rec); n != 0 {
		t.Errorf("an hour after the last decision: %d live series, want 0", n)
	}
	for _, r := range rules {
		decide(rec, []*limiter.Rule{r}, "ip:1", false)
	}
	rec.Tick(end + Window + 3)
	got := rec.Counts(end+Window+1, end+Window+2)
	own := 0
	for _, r := range rules {
		if p := got[r.Name()]; len(p) == 1 && p[0].Decisions == 1 {
			own++
		}
	}
	if p := got["other"]; own != MaxSeries || len(p) != 1 || p[0].Decisions != uint64(len(rules)-MaxSeries) {
		t.Errorf("%d of %d limits counted under their names, other %v; want %d and the rest in other", own, len(rules), p, MaxSeries)
	}
}

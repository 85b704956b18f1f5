package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// answerOf builds what a Pacer learns from an answer with the given
// RateLimit and RateLimit-Policy values; refused and retry describe a 429
// and its Retry-After (negative: none).
func answerOf(refused bool, retry time.Duration, rateLimit, policy string) *answerFields {
	a := &answerFields{refused: refused, retryAfter: max(retry, 0), hasRetry: retry >= 0}
	var pol []string
	if policy != "" {
		pol = []string{policy}
	}
	if rateLimit != "" {
		a.quotas = parseQuotas([]string{rateLimit}, pol, maxPolicies)
	}
	return a
}

func TestParseQuotas(t *testing.T) {
	t.Parallel()
	cases := []struct {
		rl, pol string
		want    []quotaField
	}{
		{`"a";r=0;t=5`, `"a";q=100;w=60`, []quotaField{{name: "a", r: 0, t: 5 * time.Second, hasT: true, q: 100, w: time.Minute}}},
		{`"a";r=3, "b";r=0;t=2`, `"b";q=5;w=1, "a";q=10`, []quotaField{
			{name: "a", r: 3, q: 10},
			{name: "b", r: 0, t: 2 * time.Second, hasT: true, q: 5, w: time.Second}}},
		{`"a";r=1;t=999999999999999`, ``, []quotaField{{name: "a", r: 1, t: maxFieldSeconds * time.Second, hasT: true}}},
		// Items without a String name, without r, with a negative r or t,
		// and unknown parameters.
		{`a;r=1, "b";t=1, "c";r=-1, "d";r=2;t=-3;x=?1`, ``, []quotaField{{name: "d", r: 2}}},
		// A malformed field is ignored as a whole.
		{`"a";r=0;t=5,`, ``, nil},
		{`"a";r=0;t=5`, `"a";q=`, []quotaField{{name: "a", r: 0, t: 5 * time.Second, hasT: true}}},
		{``, `"a";q=1;w=1`, nil},
		{`"a";r=1.5`, ``, nil},
	}
	for _, c := range cases {
		var pol []string
		if c.pol != "" {
			pol = []string{c.pol}
		}
		var rl []string
		if c.rl != "" {
			rl = []string{c.rl}
		}
		got := parseQuotas(rl, pol, maxPolicies)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("parseQuotas(%q, %q) = %+v, want %+v", c.rl, c.pol, got, c.want)
		}
	}
	// A field longer than maxFieldBytes is ignored as a whole, and so is
	// a RateLimit-Policy that long (its quotas are then unknown).
	long := `"a";r=0;t=5;x="` + strings.Repeat("x", maxFieldBytes) + `"`
	if got := parseQuotas([]string{long}, nil, maxPolicies); got != nil {
		t.Errorf("a RateLimit of %d bytes: %+v, want it ignored", len(long), got)
	}
	got := parseQuotas([]string{`"a";r=0;t=5`}, []string{`"a";q=100;w=60;x="` + strings.Repeat("x", maxFieldBytes) + `"`}, maxPolicies)
	if fmt.Sprint(got) != fmt.Sprint([]quotaField{{name: "a", r: 0, t: 5 * time.Second, hasT: true}}) {
		t.Errorf("a RateLimit-Policy of more than %d bytes: %+v, want its quotas unknown", maxFieldBytes, got)
	}
	// Field lines are joined; at most max items are kept.
	got = parseQuotas([]string{`"a";r=1`, `"b";r=2, "c";r=3`}, nil, 2)
	if len(got) != 2 || got[0].name != "a" || got[1].name != "b" {
		t.Errorf("two lines, max 2: %+v", got)
	}
}

func FuzzParseQuotas(f *testing.F) {
	f.Add(`"a";r=0;t=5`, `"a";q=100;w=60`)
	f.Add(`"burst";r=0;t=17, "daily";r=4210;t=51234;pk=:YWNtZS0xMjM=:`, `"burst";q=100;w=60`)
	f.Fuzz(func(t *testing.T, rl, pol string) {
		for _, q := range parseQuotas([]string{rl}, []string{pol}, maxPolicies) {
			if q.r < 0 || q.t < 0 || q.t > maxFieldSeconds*time.Second || q.q < 0 || q.w < 0 || q.w > maxFieldSeconds*time.Second {
				t.Fatalf("parseQuotas(%q, %q) gave %+v", rl, pol, q)
			}
		}
	})
}

// simSeeds is the number of simulated runs.
var simSeeds = 60

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// mustTake takes a ticket at now or fails.
func mustTake(t *testing.T, p *Pacer, now time.Time, key, kind string) *ticket {
	t.Helper()
	tk, v, _ := p.take(now, key, p.class(kind))
	if tk == nil {
		t.Fatalf("%s %s at %s: held (%+v), want sent", key, kind, now.Sub(t0), v)
	}
	return tk
}

// mustHold checks that a request is held at now and returns the verdict.
func mustHold(t *testing.T, p *Pacer, now time.Time, key, kind string) verdict {
	t.Helper()
	tk, v, ch := p.take(now, key, p.class(kind))
	if tk != nil {
		tk.finish(now, nil)
		t.Fatalf("%s %s at %s: sent, want held", key, kind, now.Sub(t0))
	}
	if ch == nil {
		t.Fatalf("held without a channel to wait on")
	}
	return v
}

func TestPacerHoldsUntilTheReset(t *testing.T) {
	t.Parallel()
	p := NewPacer(PacerOptions{})
	mustTake(t, p, t0, "h", "GET /").finish(t0, answerOf(false, -1, `"p";r=0;t=5`, ""))
	v := mustHold(t, p, t0.Add(4999*time.Millisecond), "h", "GET /")
	if !v.until.Equal(t0.Add(5*time.Second)) || v.policy != "p" || v.answers {
		t.Fatalf("verdict %+v, want until the reset at +5s for policy p", v)
	}
	// Another host is not held.
	mustTake(t, p, t0.Add(time.Second), "other", "GET /").finish(t0.Add(time.Second), nil)
	// After the reset one request finds out, the next waits for its answer.
	tk := mustTake(t, p, t0.Add(5*time.Second), "h", "GET /")
	if v := mustHold(t, p, t0.Add(5*time.Second), "h", "GET /"); !v.answers || !v.until.IsZero() {
		t.Fatalf("verdict %+v, want waiting for the answer in flight", v)
	}
	tk.finish(t0.Add(5*time.Second), answerOf(false, -1, `"p";r=9;t=1`, ""))
	for range 9 {
		mustTake(t, p, t0.Add(5*time.Second), "h", "GET /")
	}
	mustHold(t, p, t0.Add(5*time.Second), "h", "GET /")
}

func TestPacerCountsRequestsInFlight(t *testing.T) {
	t.Parallel()
	p := NewPacer(PacerOptions{})
	mustTake(t, p, t0, "h", "GET /").finish(t0, answerOf(false, -1, `"p";r=3;t=10`, `"p";q=10;w=10`))
	a := mustTake(t, p, t0, "h", "GET /")
	b := mustTake(t, p, t0, "h", "GET /")
	c := mustTake(t, p, t0, "h", "GET /")
	if v := mustHold(t, p, t0, "h", "GET /"); !v.answers {
		t.Fatalf("verdict %+v, want waiting for answers in flight", v)
	}
	// An attempt that failed without an answer gives its unit back.
	a.finish(t0, nil)
	d := mustTake(t, p, t0, "h", "GET /")
	// The newest answer says what remains, counting the others in flight.
	d.finish(t0, answerOf(false, -1, `"p";r=1;t=10`, ""))
	// b and c are in flight against r=1: nothing more goes.
	mustHold(t, p, t0, "h", "GET /")
	// b, older, answered with a higher r: it does not raise it.
	b.finish(t0, answerOf(false, -1, `"p";r=2;t=10`, ""))
	mustHold(t, p, t0, "h", "GET /")
	// c, older, answered lower: it lowers r to 0, so the key waits for the reset.
	c.finish(t0, answerOf(false, -1, `"p";r=0;t=10`, ""))
	if v := mustHold(t, p, t0, "h", "GET /"); !v.until.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("verdict %+v, want until +10s", v)
	}
}

// TestPacerCountsAnswersThatOvertookANewCount: g and h go out together;
// the server counts g, then h, in a new window (9 left, then 8), and h's
// answer comes back first, before the known reset, where it cannot raise
// what remains. When g's answer starts the new count after the reset, h
// is counted against it: 8 remain, not 9.
func TestPacerCountsAnswersThatOvertookANewCount(t *testing.T) {
	t.Parallel()
	p := NewPacer(PacerOptions{})
	mustTake(t, p, t0, "h", "GET /").finish(t0, answerOf(false, -1, `"p";r=3;t=1`, ""))
	g := mustTake(t, p, t0, "h", "GET /")
	h := mustTake(t, p, t0, "h", "GET /")
	h.finish(t0.Add(500*time.Millisecond), answerOf(false, -1, `"p";r=8;t=1`, ""))
	at := t0.Add(1500 * time.Millisecond)
	g.finish(at, answerOf(false, -1, `"p";r=9;t=1`, ""))
	for range 8 {
		mustTake(t, p, at, "h", "GET /")
	}
	mustHold(t, p, at, "h", "GET /")
}

func TestPacerRetryAfterWins(t *testing.T) {
	t.Parallel()
	p := NewPacer(PacerOptions{})
	// A 429 whose policy is used up with t=1 and Retry-After 10: 10 wins.
	mustTake(t, p, t0, "h", "GET /").finish(t0, answerOf(true, 10*time.Second, `"p";r=0;t=1`, ""))
	if v := mustHold(t, p, t0.Add(2*time.Second), "h", "GET /"); !v.until.Equal(t0.Add(10*time.Second)) || v.policy != "p" {
		t.Fatalf("verdict %+v, want until +10s for p", v)
	}
	// A 503 with a Retry-After and no RateLimit fields holds the whole key.
	mustTake(t, p, t0, "k", "GET /a").finish(t0, answerOf(true, 3*time.Second, "", ""))
	for _, kind := range []string{"GET /a", "POST /b"} {
		if v := mustHold(t, p, t0.Add(time.Second), "k", kind); !v.until.Equal(t0.Add(3*time.Second)) || v.policy != "" {
			t.Fatalf("%s: verdict %+v, want the key held until +3s", kind, v)
		}
	}
	mustTake(t, p, t0.Add(3*time.Second), "k", "POST /b")
	// A Retry-After on an answer that is not a refusal means nothing here.
	mustTake(t, p, t0, "j", "GET /").finish(t0, &answerFields{refused: false, retryAfter: time.Hour, hasRetry: true})
	mustTake(t, p, t0, "j", "GET /")
}

func TestPacerPolicyHoldsOnlyItsKinds(t *testing.T) {
	t.Parallel()
	p := NewPacer(PacerOptions{})
	mustTake(t, p, t0, "h", "GET /api").finish(t0, answerOf(false, -1, `"api";r=100;t=1`, ""))
	mustTake(t, p, t0, "h", "POST /login").finish(t0, answerOf(true, 60*time.Second, `"login";r=0;t=60`, ""))
	// Requests to /api never carried the login policy: they go.
	for range 10 {
		mustTake(t, p, t0.Add(time.Second), "h", "GET /api")
	}
	// /login waits for its reset, and so does a kind never answered.
	for _, kind := range []string{"POST /login", "GET /new"} {
		if v := mustHold(t, p, t0.Add(time.Second), "h", kind); v.policy != "login" {
			t.Fatalf("%s: verdict %+v, want held by login", kind, v)
		}
	}
}

func TestPacerRefillsAfterTheReset(t *testing.T) {
	t.Parallel()
	p := NewPacer(PacerOptions{})
	mustTake(t, p, t0, "h", "GET /").finish(t0, answerOf(false, -1, `"p";r=0;t=1`, `"p";q=10;w=10`))
	// Five seconds after the reset: 1 + 10·5/10 units.
	at := t0.Add(6 * time.Second)
	for range 6 {
		mustTake(t, p, at, "h", "GET /")
	}
	mustHold(t, p, at, "h", "GET /")
	// A full window after the reset: the whole quota (10), 6 in flight.
	at = t0.Add(11 * time.Second)
	for range 4 {
		mustTake(t, p, at, "h", "GET /")
	}
	mustHold(t, p, at, "h", "GET /")
}

// TestPacerStateIsBounded floods one Pacer with keys, policies and kinds
// of requests: it never holds more than its bounds.
func TestPacerStateIsBounded(t *testing.T) {
	t.Parallel()
	p := NewPacer(PacerOptions{MaxKeys: 50})
	rng := rand.New(rand.NewPCG(1, 2))
	now := t0
	for i := range 20000 {
		now = now.Add(time.Millisecond)
		key := fmt.Sprintf("host-%d", rng.IntN(200))
		kind := fmt.Sprintf("GET /%d", rng.IntN(500))
		tk, _, _ := p.take(now, key, p.class(kind))
		if tk == nil {
			continue
		}
		tk.finish(now, answerOf(i%7 == 0, time.Second, fmt.Sprintf(`"p%d";r=%d;t=1`, rng.IntN(40), rng.IntN(3)), ""))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.keys) > 50 || p.lru.Len() != len(p.keys) {
		t.Fatalf("%d keys (%d in the LRU), want at most 50", len(p.keys), p.lru.Len())
	}
	for _, k := range p.keys {
		if len(k.policies) > maxPolicies || k.nclasses > maxClasses || len(k.inflight) != 0 {
			t.Fatalf("key %s: %d policies, %d kinds, %d in flight", k.name, len(k.policies), k.nclasses, len(k.inflight))
		}
	}
}

// simServer is an exact limit that a simulated client calls: it decides
// at now and returns the RateLimit item of its answer.
type simServer interface {
	decide(now time.Time) (ok bool, rateLimit, policy string)
}

// simWindow is a fixed window of max per w.
type simWindow struct {
	max int64
	w   time.Duration
	at  time.Time
	n   int64
}

func (s *simWindow) decide(now time.Time) (bool, string, string) {
	start := now.Truncate(s.w)
	if !start.Equal(s.at) {
		s.at, s.n = start, 0
	}
	ok := s.n < s.max
	if ok {
		s.n++
	}
	left := start.Add(s.w).Sub(now)
	return ok, fmt.Sprintf(`"win";r=%d;t=%d`, s.max-s.n, ceilSec(left)),
		fmt.Sprintf(`"win";q=%d;w=%d`, s.max, ceilSec(s.w))
}

// simBucket is a token bucket (GCRA) of rate per second and burst, with t
// the time until one more unit, as Floodgate's gateway renders it.
type simBucket struct {
	rate  int64
	burst int64
	tat   time.Time
}

func (s *simBucket) decide(now time.Time) (bool, string, string) {
	T := time.Second / time.Duration(s.rate)
	tau := T * time.Duration(s.burst)
	tat := s.tat
	if tat.Before(now) {
		tat = now
	}
	next := tat.Add(T)
	ok := next.Sub(now) <= tau
	if ok {
		s.tat, tat = next, next
	}
	rem := int64((tau - tat.Sub(now)) / T)
	// Time until Remaining+1: when tat - now falls to tau - (rem+1)·T.
	tt := tat.Sub(now) - (tau - time.Duration(rem+1)*T)
	w := (time.Duration(s.burst)*time.Second + time.Duration(s.rate) - 1) / time.Duration(s.rate)
	return ok, fmt.Sprintf(`"tb";r=%d;t=%d`, rem, ceilSec(tt)), fmt.Sprintf(`"tb";q=%d;w=%d`, s.burst, max(ceilSec(w), 1))
}

func ceilSec(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// simulate runs workers that call srv through p as fast as it lets them,
// for dur of virtual time, each request taking a random time up to lat to
// reach the server and again to come back (so answers overtake each
// other). It returns the requests sent and those refused among the ones
// sent after a first answer (before it, nothing is known).
func simulate(t *testing.T, rng *rand.Rand, p *Pacer, srv simServer, workers int, lat, dur time.Duration) (sent, refused int) {
	t.Helper()
	type event struct {
		at     time.Time
		worker int
		tk     *ticket
		stage  int // 0: try to send, 1: reaches the server, 2: answer comes back
		ok     bool
		// informed is set on a request sent after a first answer.
		informed bool
		rl, pl   string
	}
	// queue is a binary heap by time; n breaks ties in order of pushing.
	type item struct {
		e event
		n int
	}
	var queue []item
	pushed := 0
	less := func(a, b item) bool { return a.e.at.Before(b.e.at) || a.e.at.Equal(b.e.at) && a.n < b.n }
	push := func(e event) {
		pushed++
		queue = append(queue, item{e, pushed})
		for i := len(queue) - 1; i > 0; {
			up := (i - 1) / 2
			if !less(queue[i], queue[up]) {
				break
			}
			queue[i], queue[up] = queue[up], queue[i]
			i = up
		}
	}
	pop := func() event {
		top := queue[0].e
		last := len(queue) - 1
		queue[0] = queue[last]
		queue = queue[:last]
		for i := 0; ; {
			l, r, m := 2*i+1, 2*i+2, i
			if l < len(queue) && less(queue[l], queue[m]) {
				m = l
			}
			if r < len(queue) && less(queue[r], queue[m]) {
				m = r
			}
			if m == i {
				break
			}
			queue[i], queue[m] = queue[m], queue[i]
			i = m
		}
		return top
	}
	end := t0.Add(dur)
	answered := false
	busy := map[int]bool{}   // a request of the worker is out
	parked := map[int]bool{} // the worker is held
	for w := range workers {
		push(event{at: t0, worker: w})
	}
	delay := func() time.Duration { return time.Duration(rng.Int64N(int64(lat) + 1)) }
	for len(queue) > 0 {
		e := pop()
		if e.at.After(end) {
			break
		}
		switch e.stage {
		case 0:
			if busy[e.worker] {
				continue // a wake-up of a worker that went already
			}
			tk, v, _ := p.take(e.at, "srv", p.class("GET /"))
			if tk == nil {
				parked[e.worker] = true
				if !v.until.IsZero() {
					push(event{at: v.until, worker: e.worker})
				}
				continue
			}
			delete(parked, e.worker)
			busy[e.worker] = true
			sent++
			push(event{at: e.at.Add(delay()), worker: e.worker, tk: tk, stage: 1, informed: answered})
		case 1:
			ok, rl, pl := srv.decide(e.at)
			if !ok && e.informed {
				refused++
			}
			push(event{at: e.at.Add(delay()), worker: e.worker, tk: e.tk, stage: 2, ok: ok, rl: rl, pl: pl})
		case 2:
			e.tk.finish(e.at, answerOf(!e.ok, -1, e.rl, e.pl))
			answered = true
			busy[e.worker] = false
			push(event{at: e.at, worker: e.worker})
			for w := range parked {
				push(event{at: e.at, worker: w})
			}
		}
	}
	return sent, refused
}

// TestPacerSendsNothingIntoAnExactLimit: up to 32 workers pacing
// themselves with one Pacer against an exact limit (a fixed window of 1 to
// 10 seconds, a token bucket), with up to 2s each way so that requests and
// answers overtake each other (across resets too), never send a request
// the limit refuses once they have had an answer, and still send at least
// a third of what the limit's fields let them know they may.
func TestPacerSendsNothingIntoAnExactLimit(t *testing.T) {
	t.Parallel()
	for seed := range uint64(simSeeds) {
		rng := rand.New(rand.NewPCG(seed, 7))
		workers := 1 + rng.IntN(32)
		lat := time.Duration(rng.IntN(2000)) * time.Millisecond
		// most is the rate the limit lets through, as far as its whole
		// seconds of t tell: a token bucket whose burst is smaller than
		// its rate per second is paced to about its burst a second.
		var srv simServer
		var most float64
		if seed%2 == 0 {
			max, w := 1+rng.Int64N(100), time.Duration(1+rng.IntN(10))*time.Second
			srv, most = &simWindow{max: max, w: w}, float64(max)/w.Seconds()
		} else {
			r, b := 1+rng.Int64N(50), 1+rng.Int64N(50)
			srv, most = &simBucket{rate: r, burst: b}, float64(min(r, b))
		}
		// And no more than the workers can send one after the other (a
		// round trip takes lat on average).
		most = min(most, float64(workers)/(lat+time.Millisecond).Seconds())
		const dur = 120 * time.Second
		sent, refused := simulate(t, rng, NewPacer(PacerOptions{}), srv, workers, lat, dur)
		if refused != 0 {
			t.Errorf("seed %d (%T, %d workers, latency up to %s): %d of %d requests refused, want none",
				seed, srv, workers, lat, refused, sent)
		}
		// Liveness: a window can be lost after each exhaustion (t is
		// rounded up), but at least a third of that rate goes.
		if got := float64(sent) / dur.Seconds(); got < most/3 {
			t.Errorf("seed %d (%T, %d workers, latency up to %s): %.1f sent a second, want at least a third of %.1f",
				seed, srv, workers, lat, got, most)
		}
	}
}

func TestPacerAcquireFailsFastPastTheDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := NewPacer(PacerOptions{MaxHold: 30 * time.Second})
		c := p.class("GET /")
		tk, err := p.acquire(context.Background(), "h", c)
		if err != nil {
			t.Fatal(err)
		}
		tk.finish(time.Now(), answerOf(true, 10*time.Second, `"p";r=0;t=10`, ""))

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		_, err = p.acquire(ctx, "h", c)
		var he *HoldError
		if !errors.As(err, &he) || !errors.Is(err, ErrHeldBack) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want a *HoldError wrapping ErrHeldBack and context.DeadlineExceeded", err)
		}
		if time.Since(start) != 0 || he.Wait != 10*time.Second || he.Policy != "p" || he.Key != "h" {
			t.Fatalf("failed after %s with %+v, want at once, Wait 10s, policy p, key h", time.Since(start), he)
		}
		// Past MaxHold, with no deadline: at once too, without a cause.
		tk, _ = p.acquire(ctx, "g", c)
		tk.finish(time.Now(), answerOf(true, time.Minute, "", ""))
		_, err = p.acquire(context.Background(), "g", c)
		if !errors.As(err, &he) || he.Cause != nil || he.Wait != time.Minute {
			t.Fatalf("err = %v, want a *HoldError for MaxHold", err)
		}
		if s := p.Stats(); s.Refused != 2 || s.Held != 0 {
			t.Fatalf("stats %+v, want 2 refused and none held", s)
		}
		// Within the deadline: it waits for the reset exactly.
		ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
		defer cancel2()
		start = time.Now()
		tk, err = p.acquire(ctx2, "h", c)
		if err != nil {
			t.Fatal(err)
		}
		tk.finish(time.Now(), nil)
		if el := time.Since(start); el != 10*time.Second {
			t.Fatalf("held %s, want the 10s to the reset", el)
		}
		if s := p.Stats(); s.Held != 1 || s.HeldFor != 10*time.Second {
			t.Fatalf("stats %+v, want 1 held for 10s", s)
		}
	})
}

func TestPacerAcquireWaitsForAnswersInFlight(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := NewPacer(PacerOptions{})
		c := p.class("GET /")
		tk, _ := p.acquire(context.Background(), "h", c)
		tk.finish(time.Now(), answerOf(false, -1, `"p";r=1;t=60`, ""))
		first, _ := p.acquire(context.Background(), "h", c)
		got := make(chan error, 1)
		go func() {
			tk, err := p.acquire(context.Background(), "h", c)
			if err == nil {
				tk.finish(time.Now(), nil)
			}
			got <- err
		}()
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("second request went (%v) while the last unit was in flight", err)
		default:
		}
		time.Sleep(300 * time.Millisecond)
		first.finish(time.Now(), answerOf(false, -1, `"p";r=5;t=60`, ""))
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		// A held request whose context ends fails with the context's error.
		last, _ := p.acquire(context.Background(), "h", c)
		last.finish(time.Now(), answerOf(false, -1, `"p";r=1;t=60`, ""))
		last, _ = p.acquire(context.Background(), "h", c)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(time.Second); cancel() }()
		_, err := p.acquire(ctx, "h", c)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrHeldBack) {
			t.Fatalf("err = %v, want ErrHeldBack and context.Canceled", err)
		}
		last.finish(time.Now(), nil)
	})
}

func TestHoldErrorMessages(t *testing.T) {
	t.Parallel()
	cases := []struct {
		e    HoldError
		want string
	}{
		{HoldError{Key: "api:443", Policy: "burst", Wait: 17 * time.Second, Cause: context.DeadlineExceeded},
			`client: held back: api:443 has no quota left (policy "burst") for 17s, past the request's deadline: context deadline exceeded`},
		{HoldError{Key: "api:443", Wait: time.Hour},
			`client: held back: api:443 has no quota left (its Retry-After) for 1h0m0s, longer than the pacer's MaxHold`},
		{HoldError{Key: "api:443", Policy: "daily", Wait: time.Minute, Cause: context.Canceled},
			`client: held back: api:443 has no quota left (policy "daily") for 1m0s: context canceled`},
		{HoldError{Key: "api:443", Cause: context.Canceled},
			`client: held back: api:443 was waiting for quota (answers in flight): context canceled`},
	}
	for _, c := range cases {
		if got := c.e.Error(); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
		if !errors.Is(&c.e, ErrHeldBack) || c.e.Cause != nil && !errors.Is(&c.e, c.e.Cause) {
			t.Errorf("%s: does not unwrap to ErrHeldBack and its cause", c.want)
		}
	}
}

// TestPacerKeyWideHoldEndsOneRequestAtATime: after a Retry-After that
// named no used-up policy, one request goes; each answer the server
// accepts lets one more be in flight, a new refusal starts again from one,
// and after maxProbe accepted answers the key is unbounded again.
func TestPacerKeyWideHoldEndsOneRequestAtATime(t *testing.T) {
	t.Parallel()
	p := NewPacer(PacerOptions{})
	ok := answerOf(false, -1, "", "")
	mustTake(t, p, t0, "k", "GET /a").finish(t0, answerOf(true, 2*time.Second, "", ""))
	at := t0.Add(2 * time.Second)
	first := mustTake(t, p, at, "k", "GET /a")
	if v := mustHold(t, p, at, "k", "POST /b"); !v.answers || !v.until.IsZero() {
		t.Fatalf("verdict %+v while the first request after the wait is out, want held for its answer", v)
	}
	first.finish(at, ok)
	a, b := mustTake(t, p, at, "k", "GET /a"), mustTake(t, p, at, "k", "GET /a")
	mustHold(t, p, at, "k", "GET /a")
	// A refusal with a Retry-After holds the key again, then one goes.
	a.finish(at, answerOf(true, time.Second, "", ""))
	b.finish(at, ok)
	at = at.Add(time.Second)
	c := mustTake(t, p, at, "k", "GET /a")
	mustHold(t, p, at, "k", "GET /a")
	c.finish(at, ok)
	// A request that ends without an answer lets the next one go.
	mustTake(t, p, at, "k", "GET /a").finish(at, nil)
	var out []*ticket
	for range 2 {
		out = append(out, mustTake(t, p, at, "k", "GET /a"))
	}
	mustHold(t, p, at, "k", "GET /a")
	for _, tk := range out {
		tk.finish(at, ok)
	}
	for range maxProbe {
		mustTake(t, p, at, "k", "GET /a").finish(at, ok)
	}
	for range 2 * maxProbe {
		mustTake(t, p, at, "k", "GET /a")
	}
}

// TestPacerKeyWideHoldIgnoresRequestsSentBefore: a request sent before a
// key-wide Retry-After and still unanswered (a stalled answer, a stream
// that stays open) does not hold back the one that goes to find out.
func TestPacerKeyWideHoldIgnoresRequestsSentBefore(t *testing.T) {
	t.Parallel()
	p := NewPacer(PacerOptions{})
	stream := mustTake(t, p, t0, "k", "GET /watch")
	mustTake(t, p, t0, "k", "GET /a").finish(t0, answerOf(true, time.Second, "", ""))
	at := t0.Add(time.Second)
	probe := mustTake(t, p, at, "k", "GET /a")
	mustHold(t, p, at, "k", "GET /a")
	probe.finish(at, answerOf(false, -1, "", ""))
	mustTake(t, p, at, "k", "GET /a")
	stream.finish(at, nil)
}

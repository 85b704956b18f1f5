package replay

import (
	"time"
)

// Agreement compares a replay with the decisions its log records (the
// gateway's own, or a 429/503 of NGINX or Envoy).
type Agreement struct {
	// Compared counts the requests whose decision the log records;
	// Matched those the replay decides the same way.
	Compared int64 `json:"compared"`
	Matched  int64 `json:"matched"`
	// ReplayDenied counts requests the log shows allowed and the replay
	// refuses; ReplayAllowed the other way round.
	ReplayDenied  int64 `json:"replay_denied"`
	ReplayAllowed int64 `json:"replay_allowed"`
	// Degraded counts requests left out: the log shows them decided by
	// failure policies while the store failed.
	Degraded int64 `json:"degraded,omitempty"`
	// Shed counts requests the log shows shed by overload control (503
	// after the limits allowed them): their limits are compared as
	// logged; the shedding itself is reported, not simulated.
	Shed int64 `json:"shed,omitempty"`
	// Tolerance is how far a logged time may be from the instant the
	// live decision was made: the log's resolution, and the clocks'.
	Tolerance Duration `json:"tolerance"`
	// Why the others differ: Boundary, the request came within Tolerance
	// of a refill or a window's end, and moving it by at most Tolerance
	// gives the logged decision (the replay then charges it as the log
	// says, at the nearest instant that gives it, and its counters stay
	// equal to the live ones); Reordered, two requests on one counter
	// within Tolerance of each other were decided in the other order;
	// Unexplained, none of these.
	Boundary    int64 `json:"boundary"`
	Reordered   int64 `json:"reordered"`
	Unexplained int64 `json:"unexplained"`
	// Mismatches shows the first differences (all of them up to
	// maxMismatches, then only the unexplained ones).
	Mismatches []Mismatch `json:"mismatches,omitempty"`
}

// Rate is Matched / Compared (1 when nothing was compared).
func (a *Agreement) Rate() float64 {
	if a.Compared == 0 {
		return 1
	}
	return float64(a.Matched) / float64(a.Compared)
}

// Mismatch is one request the replay decided differently from the log.
type Mismatch struct {
	Time     time.Time `json:"time"`
	Log      string    `json:"log"`
	Line     int64     `json:"line"`
	ClientIP string    `json:"client_ip,omitempty"`
	Method   string    `json:"method"`
	Path     string    `json:"path"`
	Key      string    `json:"key,omitempty"`
	// Logged is what the log says (allow or deny) and LoggedLimit the
	// limit it names; Replay and ReplayLimit the replay's.
	Logged      string `json:"logged"`
	LoggedLimit string `json:"logged_limit,omitempty"`
	Replay      string `json:"replay"`
	ReplayLimit string `json:"replay_limit,omitempty"`
	// Counter is the limit and key the difference is on.
	Counter string `json:"counter"`
	// Class is boundary, reordered or unexplained.
	Class string `json:"class"`
	// Before and After are the replay's decisions Tolerance earlier and
	// later (allow or deny).
	Before string `json:"before"`
	After  string `json:"after"`
}

const maxMismatches = 20

// checker classifies the differences between a replay and its log.
type checker struct {
	a     *Agreement
	tol   int64
	names []string
	// pending are unexplained differences that a later opposite one
	// within the tolerance may pair with; stale ones are dropped once the
	// map holds pruneAt counters (see prune).
	pending map[string][]pendingMismatch
	pruneAt int
}

type pendingMismatch struct {
	t   int64
	dir int
	ex  int // index in a.Mismatches, or -1
}

func newChecker(tol time.Duration, names []string) *checker {
	return &checker{a: &Agreement{Tolerance: Duration(tol)}, tol: int64(tol), names: names,
		pending: map[string][]pendingMismatch{}, pruneAt: minPrune}
}

// minPrune is the number of counters with pending differences at which
// the first prune happens.
const minPrune = 1024

// prune drops the pending differences too old to pair with a request at
// t or later, and sets the next prune at twice the counters left (at
// least minPrune): whatever the number of distinct clients in a log, the
// map holds those of the last tolerance, at a cost that stays constant
// per difference.
func (c *checker) prune(t int64) {
	for counter, ps := range c.pending {
		kept := ps[:0]
		for _, p := range ps {
			if t-p.t <= c.tol {
				kept = append(kept, p)
			}
		}
		if len(kept) == 0 {
			delete(c.pending, counter)
		} else {
			c.pending[counter] = kept
		}
	}
	c.pruneAt = max(minPrune, 2*len(c.pending))
}

// check decides the prepared record rec on r and compares the replay's
// decision with the logged one: it peeks first, and on a difference peeks
// again a tolerance earlier and later, before charging.
//
// A difference the tolerance explains (a boundary) is decided as the log
// says, at the instant nearest the logged time that gives the logged
// answer (see nearest): the log cannot tell which instant the live limit
// saw, and charging what the live limit charged keeps the replay's
// counters equal to the live ones, so one boundary is one difference and
// not a second one later, when the unit it moved is repaid.
func (c *checker) check(r *Replayer, rec *Record) *Outcome {
	a := c.a
	if rec.Shed != "" {
		a.Shed++
	}
	switch rec.Logged {
	case LoggedDegraded:
		a.Degraded++
		return r.decide(rec)
	case LoggedUnknown:
		return r.decide(rec)
	}
	a.Compared++
	loggedDeny := rec.Logged == LoggedDeny
	var o *Outcome
	if loggedDeny {
		// A request the replay would allow is charged: look a tolerance
		// either side first, while the state is as it was.
		if r.peek(rec.Time) {
			a.Matched++
			return r.decide(rec)
		}
	} else {
		// A refused request charges nothing: the state stays as it was.
		if o = r.decide(rec); !o.Denied {
			a.Matched++
			return o
		}
	}
	before, after := r.peek(rec.Time-c.tol), r.peek(rec.Time+c.tol)
	dir := 1 // the replay refuses what the log allowed: it has a unit more
	if loggedDeny {
		dir = -1
		a.ReplayAllowed++
	} else {
		a.ReplayDenied++
	}
	if before == loggedDeny || after == loggedDeny {
		at := rec.Time + c.tol
		if before == loggedDeny {
			at = rec.Time - c.tol
		}
		if o != nil {
			c.note(rec, o, "boundary", before, after)
		}
		o = r.decideAt(rec, nearest(r, rec.Time, at, loggedDeny))
		if loggedDeny {
			c.note(rec, o, "boundary", before, after)
		}
		a.Boundary++
		return o
	}
	if o == nil {
		o = r.decide(rec)
	}
	counter := c.counter(rec, o)
	class := "unexplained"
	if p := c.partner(counter, rec.Time, dir); p != nil {
		class = "reordered"
		if p.ex >= 0 {
			a.Mismatches[p.ex].Class = class
		}
		a.Unexplained--
		a.Reordered++
	}
	ex := c.note(rec, o, class, before, after)
	if class == "reordered" {
		a.Reordered++
		return o
	}
	a.Unexplained++
	c.pending[counter] = append(c.pending[counter], pendingMismatch{t: rec.Time, dir: dir, ex: ex})
	if len(c.pending) >= c.pruneAt {
		c.prune(rec.Time)
	}
	return o
}

// note lists a difference, as long as there is room: its index in
// a.Mismatches, or -1. The replay's answer is the other one than the log's.
func (c *checker) note(rec *Record, o *Outcome, class string, before, after bool) int {
	a := c.a
	if len(a.Mismatches) >= maxMismatches && (class != "unexplained" || len(a.Mismatches) >= 2*maxMismatches) {
		return -1
	}
	a.Mismatches = append(a.Mismatches, c.mismatch(rec, o, c.counter(rec, o), class, before, after))
	return len(a.Mismatches) - 1
}

// counter names the limit and key a difference is on: the replay's
// binding limit, or the one the log names.
func (c *checker) counter(rec *Record, o *Outcome) string {
	m := o.Match
	if !o.Denied {
		// The log refused it: the limit it names.
		for i, l := range m.Limits {
			if l.Name == rec.Limit {
				return l.Name + "|" + m.Hits[i].Key
			}
		}
	}
	if b := o.Result.Binding; b >= 0 && b < len(m.Hits) {
		return m.Limits[b].Name + "|" + m.Hits[b].Key
	}
	return "-"
}

// nearest is the instant nearest to t, toward edge, at which the replay
// gives the logged answer (deny when loggedDeny): edge gives it and t does
// not. The live limit decided at an instant the log shows as t, so the
// replay charges the request at the nearest instant that gives the
// logged answer, not at the tolerance's edge, which would give it the
// refills or windows of the whole tolerance (a second, in a log of whole
// seconds) that the live limit had not seen.
func nearest(r *Replayer, t, edge int64, loggedDeny bool) int64 {
	for edge-t > 1 || t-edge > 1 {
		mid := t + (edge-t)/2
		if r.peek(mid) == loggedDeny {
			edge = mid
		} else {
			t = mid
		}
	}
	return edge
}

// partner finds and removes an unexplained difference of the other
// direction on counter within the tolerance before t.
func (c *checker) partner(counter string, t int64, dir int) *pendingMismatch {
	ps := c.pending[counter]
	kept := ps[:0]
	var found *pendingMismatch
	for i := range ps {
		p := ps[i]
		switch {
		case t-p.t > c.tol:
			// too old to pair with anything later
		case found == nil && p.dir == -dir:
			f := p
			found = &f
		default:
			kept = append(kept, p)
		}
	}
	if len(kept) == 0 {
		delete(c.pending, counter)
	} else {
		c.pending[counter] = kept
	}
	return found
}

func (c *checker) mismatch(rec *Record, o *Outcome, counter, class string, before, after bool) Mismatch {
	word := func(deny bool) string {
		if deny {
			return "deny"
		}
		return "allow"
	}
	// The replay decided the other way at the logged time (o may be its
	// decision at the boundary's other instant, which agrees with the log).
	replayDenied := rec.Logged != LoggedDeny
	m := Mismatch{Time: time.Unix(0, rec.Time).UTC(), Line: rec.Line, Method: rec.Method, Path: rec.Path,
		Key: o.Match.KeyID, Logged: rec.Logged.String(), LoggedLimit: rec.Limit, Replay: word(replayDenied),
		Counter: counter, Class: class, Before: word(before), After: word(after)}
	if rec.Source < len(c.names) {
		m.Log = c.names[rec.Source]
	}
	if rec.ClientIP.IsValid() {
		m.ClientIP = rec.ClientIP.String()
	}
	if l := o.Binding(); l != nil && replayDenied {
		m.ReplayLimit = l.Name
	}
	return m
}

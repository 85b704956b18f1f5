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
	// Tolerance is how far a logged time may be from the instant the
	// live decision was made: the log's resolution, and the clocks'.
	Tolerance Duration `json:"tolerance"`
	// Why the others differ: Follows, it repays an earlier explained
	// difference on the same counter (that one left the replay a unit
	// more, or less, than the live limit had on every counter of its
	// request); Boundary, the request came within Tolerance of a refill or
	// a window's end, and moving it by at most Tolerance gives the logged
	// decision; Reordered, two requests on one counter within Tolerance
	// of each other were decided in the other order; Unexplained, none of
	// these.
	Boundary    int64 `json:"boundary"`
	Follows     int64 `json:"follows"`
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
	// Class is boundary, follows, reordered or unexplained.
	Class string `json:"class"`
	// Before and After are the replay's decisions Tolerance earlier and
	// later (allow or deny).
	Before string `json:"before"`
	After  string `json:"after"`
}

const (
	maxMismatches = 20
	maxBalances   = 1 << 16
)

// checker classifies the differences between a replay and its log.
type checker struct {
	a     *Agreement
	tol   int64
	names []string
	// balance is, per counter, the units the replay has more (+) or fewer
	// (-) than the live limit had, through explained differences.
	balance map[string]int
	// pending are unexplained differences that a later opposite one
	// within the tolerance may pair with.
	pending map[string][]pendingMismatch
}

type pendingMismatch struct {
	t   int64
	dir int
	ex  int // index in a.Mismatches, or -1
}

func newChecker(tol time.Duration, names []string) *checker {
	return &checker{a: &Agreement{Tolerance: Duration(tol)}, tol: int64(tol), names: names,
		balance: map[string]int{}, pending: map[string][]pendingMismatch{}}
}

// check decides the prepared record rec on r and compares the replay's
// decision with the logged one: it peeks first, and on a difference peeks
// again a tolerance earlier and later, before charging.
func (c *checker) check(r *Replayer, rec *Record) *Outcome {
	a := c.a
	switch rec.Logged {
	case LoggedDegraded:
		a.Degraded++
		return r.decide(rec)
	case LoggedUnknown:
		return r.decide(rec)
	}
	a.Compared++
	loggedDeny := rec.Logged == LoggedDeny
	var before, after bool
	if loggedDeny {
		// A request the replay would allow is charged: look a tolerance
		// either side first, while the state is as it was.
		if r.peek(rec.Time) {
			a.Matched++
			return r.decide(rec)
		}
		before, after = r.peek(rec.Time-c.tol), r.peek(rec.Time+c.tol)
	}
	o := r.decide(rec)
	if o.Denied == loggedDeny {
		a.Matched++
		return o
	}
	if !loggedDeny {
		// Refused: nothing was charged, the state is as it was.
		before, after = r.peek(rec.Time-c.tol), r.peek(rec.Time+c.tol)
	}
	dir := 1 // the replay refuses what the log allowed: it has a unit more
	if !o.Denied {
		dir = -1
		a.ReplayAllowed++
	} else {
		a.ReplayDenied++
	}
	counter := c.counter(rec, o)
	class := "unexplained"
	switch {
	case c.balance[counter]*dir < 0:
		class = "follows"
		c.addBalances(o, dir)
	case before == loggedDeny || after == loggedDeny:
		class = "boundary"
		c.addBalances(o, dir)
	default:
		if p := c.partner(counter, rec.Time, dir); p != nil {
			class = "reordered"
			a.Unexplained--
			a.Reordered++
			if p.ex >= 0 {
				a.Mismatches[p.ex].Class = class
			}
		}
	}
	ex := -1
	if len(a.Mismatches) < maxMismatches || (class == "unexplained" && len(a.Mismatches) < 2*maxMismatches) {
		ex = len(a.Mismatches)
		a.Mismatches = append(a.Mismatches, c.mismatch(rec, o, counter, class, before, after))
	}
	switch class {
	case "boundary":
		a.Boundary++
	case "follows":
		a.Follows++
	case "reordered":
		a.Reordered++
	default:
		a.Unexplained++
		c.pending[counter] = append(c.pending[counter], pendingMismatch{t: rec.Time, dir: dir, ex: ex})
	}
	return o
}

// counter names the limit and key a difference is on: the replay's
// binding limit, or the one the log names.
func (c *checker) counter(rec *Record, o *Outcome) string {
	m := o.Match
	if !o.Denied {
		// The log refused it: the limit it names, or else one the replay
		// is known to have a unit more on.
		for i, l := range m.Limits {
			if k := l.Name + "|" + m.Hits[i].Key; l.Name == rec.Limit || rec.Limit == "" && c.balance[k] > 0 {
				return k
			}
		}
	}
	if b := o.Result.Binding; b >= 0 && b < len(m.Hits) {
		return m.Limits[b].Name + "|" + m.Hits[b].Key
	}
	return "-"
}

// addBalances notes that every counter of the request now holds a unit
// more (dir 1: the live limit charged it, the replay did not) or less
// (dir -1) in the replay than it did live.
func (c *checker) addBalances(o *Outcome, dir int) {
	for i, l := range o.Match.Limits {
		c.addBalance(l.Name+"|"+o.Match.Hits[i].Key, dir)
	}
}

func (c *checker) addBalance(counter string, dir int) {
	if _, ok := c.balance[counter]; !ok && len(c.balance) >= maxBalances {
		return
	}
	c.balance[counter] += dir
	if c.balance[counter] == 0 {
		delete(c.balance, counter)
	}
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
	m := Mismatch{Time: time.Unix(0, rec.Time).UTC(), Line: rec.Line, Method: rec.Method, Path: rec.Path,
		Key: o.Match.KeyID, Logged: rec.Logged.String(), LoggedLimit: rec.Limit, Replay: word(o.Denied),
		Counter: counter, Class: class, Before: word(before), After: word(after)}
	if rec.Source < len(c.names) {
		m.Log = c.names[rec.Source]
	}
	if rec.ClientIP.IsValid() {
		m.ClientIP = rec.ClientIP.String()
	}
	if l := o.Binding(); l != nil {
		m.ReplayLimit = l.Name
	}
	return m
}

package dashboard

import (
	"net/http"
	"sync/atomic"
)

// The answers refused before any limit, per route: 401 (a token that does
// not verify), 403 (a missing or unknown API key, a denied address) and
// the penalty box's 429.
const (
	refusedUnauthorized = iota
	refusedForbidden
	refusedBanned
	refusedKinds
)

// refusalSeries counts one route's answers refused before any limit, per
// second.
type refusalSeries struct {
	route string
	slots [Window][refusedKinds]atomic.Uint64
	last  atomic.Int64 // the newest second counted in
}

// NoRoute names the requests no route matched in the refusals.
const NoRoute = "(no route)"

// RefusedBeforeLimit counts an answer refused before any limit: 401, 403
// or 429 (the penalty box); other statuses are not counted. At most
// MaxSeries routes have a series of their own: a route past them takes the
// series of one that counted nothing for a whole Window (a route a reload
// renamed or removed, which has nothing left to show), else it shares
// "other". It is a gateway.RefusalObserver.
func (r *Recorder) RefusedBeforeLimit(route string, status int) {
	var k int
	switch status {
	case http.StatusUnauthorized:
		k = refusedUnauthorized
	case http.StatusForbidden:
		k = refusedForbidden
	case http.StatusTooManyRequests:
		k = refusedBanned
	default:
		return
	}
	if route == "" {
		route = NoRoute
	}
	now := r.sec.Load()
	s := (*r.refused.Load())[route]
	if s == nil {
		s = r.refusalSeriesOf(route, now)
	}
	s.slots[now%Window][k].Add(1)
	if s.last.Load() != now {
		s.last.Store(now)
	}
}

// refusalSeriesOf finds or makes a route's series (the slow path: once per
// route). The map is copied on write, so that the request path reads it
// without a lock.
func (r *Recorder) refusalSeriesOf(route string, now int64) *refusalSeries {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.refused.Load()
	if s := old[route]; s != nil {
		return s
	}
	name, stale := route, ""
	if len(old) >= MaxSeries {
		for k, v := range old {
			if k != "other" && now-v.last.Load() >= Window {
				stale = k
				break
			}
		}
		if stale == "" {
			name = "other"
			if s := old[name]; s != nil {
				return s
			}
		}
	}
	s := &refusalSeries{route: name}
	s.last.Store(now)
	m := make(map[string]*refusalSeries, len(old)+1)
	for k, v := range old {
		if k != stale {
			m[k] = v
		}
	}
	m[name] = s
	r.refused.Store(&m)
	return s
}

// RefusalPoint is one second of a route's answers refused before any
// limit.
type RefusalPoint struct {
	Unauthorized uint64 `json:"u"` // 401
	Forbidden    uint64 `json:"f"` // 403
	Banned       uint64 `json:"b"` // 429 from the penalty box
}

// RefusalPoints returns, for every route that had an answer refused before
// any limit in the last hour, its points of the seconds from since+1 to
// until, oldest first.
func (r *Recorder) RefusalPoints(since, until int64) map[string][]RefusalPoint {
	all := *r.refused.Load()
	from := max(since+1, until-Window+1)
	out := make(map[string][]RefusalPoint, len(all))
	for name, s := range all {
		pts := make([]RefusalPoint, 0, max(until-from+1, 0))
		for t := from; t <= until; t++ {
			i := t % Window
			if r.stamps[i].Load() != t {
				pts = append(pts, RefusalPoint{})
				continue
			}
			c := &s.slots[i]
			pts = append(pts, RefusalPoint{Unauthorized: c[refusedUnauthorized].Load(), Forbidden: c[refusedForbidden].Load(),
				Banned: c[refusedBanned].Load()})
		}
		out[name] = pts
	}
	return out
}

// clearRefusals clears slot i of every route's refusals (Tick).
func (r *Recorder) clearRefusals(i int64) {
	for _, s := range *r.refused.Load() {
		for k := range s.slots[i] {
			s.slots[i][k].Store(0)
		}
	}
}

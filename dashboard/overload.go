package dashboard

import (
	"sync/atomic"
	"time"
)

// overloadSeries is one route's overload control per second: the cap and
// the adaptive limit's latency, as last sampled in that second.
type overloadSeries struct {
	route   string
	limit   [Window]atomic.Int64
	latency [Window]atomic.Int64 // ns
	stamps  [Window]atomic.Int64 // the second each slot holds
	last    atomic.Int64         // the newest second sampled
}

// OverloadPoint is one second of a route's overload control.
type OverloadPoint struct {
	T     int64   `json:"t"`
	Limit int64   `json:"limit"`
	Ms    float64 `json:"latency_ms"`
}

// RecordOverload notes the state of a route's overload control in the
// current second: its cap and the adaptive limit's latency (0 for a fixed
// cap). At most MaxSeries routes have a series: a route past them gets
// the series of one not sampled for a whole Window (a route a reload
// renamed or removed, which has nothing left to show), else it is left
// out. Call it from one goroutine (the one that calls Tick).
func (r *Recorder) RecordOverload(route string, limit int, latency time.Duration) {
	now := r.sec.Load()
	r.mu.Lock()
	s := r.overload[route]
	if s == nil {
		if len(r.overload) >= MaxSeries {
			r.dropStaleOverload(now)
		}
		if len(r.overload) < MaxSeries {
			s = &overloadSeries{route: route}
			r.overload[route] = s
		}
	}
	r.mu.Unlock()
	if s == nil {
		return
	}
	s.last.Store(now)
	i := now % Window
	s.limit[i].Store(int64(limit))
	s.latency[i].Store(int64(latency))
	s.stamps[i].Store(now)
}

// dropStaleOverload drops one series not sampled for a whole Window
// before now, if there is one. r.mu is held.
func (r *Recorder) dropStaleOverload(now int64) {
	for route, s := range r.overload {
		if now-s.last.Load() >= Window {
			delete(r.overload, route)
			return
		}
	}
}

// OverloadPoints returns each route's overload control per second in
// (since, until], leaving out the seconds nothing was sampled in.
func (r *Recorder) OverloadPoints(since, until int64) map[string][]OverloadPoint {
	r.mu.Lock()
	all := make([]*overloadSeries, 0, len(r.overload))
	for _, s := range r.overload {
		all = append(all, s)
	}
	r.mu.Unlock()
	out := make(map[string][]OverloadPoint, len(all))
	for _, s := range all {
		var pts []OverloadPoint
		for t := max(since+1, until-Window+1); t <= until; t++ {
			i := t % Window
			if s.stamps[i].Load() != t {
				continue
			}
			pts = append(pts, OverloadPoint{T: t, Limit: s.limit[i].Load(), Ms: float64(s.latency[i].Load()) / 1e6})
		}
		if len(pts) > 0 {
			out[s.route] = pts
		}
	}
	return out
}

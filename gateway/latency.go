package gateway

import "time"

// LatencyObserver is an Observer that also takes the time of each request
// per route (*metrics.Metrics is one): the gateway's own time, from the
// request's arrival in the admission flow to its end less the upstream's,
// and, when it was forwarded, the upstream's, from sending it to the end
// of its answer. Requests only looked at (explain) are not observed.
type LatencyObserver interface {
	Latency(route string, gateway, upstream time.Duration, forwarded bool)
}

// timing is a request's times for a LatencyObserver, as monoNow reads
// them (0: not read).
type timing struct {
	began, upFrom, upTo int64
}

// monoBase is the instant the gateway's latency times count from.
var monoBase = time.Now()

// monoNow reads the monotonic clock alone, in nanoseconds since monoBase
// plus one (never 0): half the cost of time.Now, which reads the wall
// clock too, and all that a duration needs.
func monoNow() int64 { return int64(time.Since(monoBase)) + 1 }

// UpstreamBegan notes that the request is being sent to its upstream (an
// engine calls it before its first attempt).
func (f *Flow) UpstreamBegan() {
	if f.lat {
		f.timing.upFrom = monoNow()
	}
}

// UpstreamEnded notes that the upstream's answer ended (or failed).
func (f *Flow) UpstreamEnded() {
	if f.lat && f.timing.upTo == 0 {
		f.timing.upTo = monoNow()
	}
}

// startTiming notes a request's arrival.
func (g *Gateway) startTiming(st *Flow) {
	if g.lat != nil && !st.peek {
		st.lat = true
		st.timing.began = monoNow()
	}
}

// observeLatency reports a request's times at its end.
func (g *Gateway) observeLatency(st *Flow) {
	if !st.lat {
		return
	}
	t := &st.timing
	now := monoNow()
	total := time.Duration(now - t.began)
	var up time.Duration
	forwarded := t.upFrom != 0
	if forwarded {
		end := t.upTo
		if end == 0 {
			end = now
		}
		up = time.Duration(end - t.upFrom)
	}
	g.lat.Latency(st.m.Route, max(total-up, 0), up, forwarded)
	st.lat, st.timing = false, timing{}
}

package rls

import (
	"context"
	"math"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/limiter"
)

// decide answers a request with Floodgate's semantics, in one engine call:
// all the limits that apply are checked together and charged only if the
// request passes, so a request over the limit takes nothing. A descriptor
// whose hits_addend is 0 is a check (would one more unit pass?), never
// charged. The descriptors in quota mode are one group of hits (Hit.Group):
// they stop the request only when every one of them is over its limit,
// and then only those under it are charged. When a quota descriptor is in
// shadow mode the group can never be all over: its descriptors are then
// counted as shadow ones, charged when under their limits, never stopping
// the request.
func (s *Service) decide(ctx context.Context, req *rlsv3.RateLimitRequest, app []applied, sc *scratch) (*rlsv3.RateLimitResponse, error) {
	shadowQuota := false
	for i := range app {
		if a := &app[i]; a.quota && a.rl != nil && !a.unlimited && a.rl.shadow {
			shadowQuota = true
		}
	}
	hits := sc.hits[:0]
	blocked := false             // a descriptor over the limit whatever the store says
	quotaSent, quotaOver := 0, 0 // quota descriptors asked about, and over without asking
	for i := range app {
		a := &app[i]
		rl := a.rl
		if rl == nil || a.unlimited {
			continue
		}
		c := max(a.cost, 1)
		if rl.rule == nil || c > rl.rule.Capacity() {
			// Blocked, or a cost that can never fit: over the limit
			// without asking the store, for the window's length.
			a.over = true
			a.d = floodgate.Decision{Limit: int64(rl.perUnit), ResetAfter: time.Duration(rl.unit.seconds()) * time.Second}
			if rl.rule != nil {
				a.d.Limit = rl.rule.Capacity()
			}
			a.before, a.after = a.d.Limit, a.d.Limit+a.cost
			switch {
			case rl.shadow:
			case a.quota:
				quotaOver++
			default:
				blocked = true
			}
			continue
		}
		h := limiter.Hit{Rule: rl.rule, Key: a.key, Cost: c, Check: a.cost == 0}
		if a.quota {
			quotaSent++
			if shadowQuota && rl.shadowRule != nil {
				h.Rule = rl.shadowRule
			} else if !shadowQuota {
				h.Group = 1
			}
		}
		a.hit = len(hits)
		hits = append(hits, h)
	}
	sc.hits = hits
	res := &sc.res
	*res = limiter.Result{Binding: -1, Decisions: res.Decisions[:0], Flags: res.Flags[:0]}
	if len(hits) > 0 {
		// A blocked descriptor denies without asking the store, and so do
		// quota descriptors all blocked: nothing may be charged, the
		// others are looked at.
		peek := blocked || (!shadowQuota && quotaOver > 0 && quotaSent == 0)
		sc.req = limiter.Request{Front: limiter.FrontRLS, Peek: peek, Hits: hits}
		if err := s.eng.Decide(ctx, &sc.req, res); err != nil {
			return nil, err
		}
		sc.storeFailed = res.Degraded != limiter.NotDegraded
		fill(app, res)
	}
	return s.answer(app, sc), nil
}

// fill takes each descriptor's decision from res.
func fill(app []applied, res *limiter.Result) {
	for i := range app {
		if a := &app[i]; a.hit >= 0 {
			setDecision(a, res.Decisions[a.hit])
		}
	}
}

// setDecision records a descriptor's decision and the counts its
// statistics see: the units used before and after the request (a check's
// Remaining is the units free now).
func setDecision(a *applied, d floodgate.Decision) {
	a.d = d
	a.over = !d.Allowed
	used := d.Limit - max(d.Remaining, 0)
	switch {
	case !d.Allowed || a.cost == 0:
		a.before, a.after = used, used+a.cost
	default:
		a.before, a.after = used-a.cost, used
	}
}

// denies reports whether the request is over the limit: a descriptor that
// is neither in shadow nor in quota mode is, or every descriptor in quota
// mode is (shadow ones never are).
func denies(app []applied) bool {
	quotas, quotasOver := 0, 0
	for i := range app {
		a := &app[i]
		if a.rl == nil || a.unlimited {
			continue
		}
		if a.quota {
			quotas++
			if a.over && !a.rl.shadow {
				quotasOver++
			}
			continue
		}
		if a.over && !a.rl.shadow {
			return true
		}
	}
	return quotas > 0 && quotas == quotasOver
}

// quotaGroup reports whether the quota descriptors of app were decided as
// one group of hits (none is in shadow mode: see decide), and whether
// they stop the request (every one of them is over its limit).
func quotaGroup(app []applied) (grouped, stops bool) {
	quotas, over := 0, 0
	grouped = true
	for i := range app {
		a := &app[i]
		if !a.quota || a.rl == nil || a.unlimited {
			continue
		}
		quotas++
		if a.rl.shadow {
			grouped = false
		} else if a.over {
			over++
		}
	}
	return grouped && quotas > 0, quotas > 0 && quotas == over
}

// blockedWait is the wait of the descriptors of a denied request that
// were over their limits without asking the engine (requests_per_unit 0,
// or a cost past the capacity: the length of their unit), as the engine
// works out the wait of the others (limiter.Result.RetryAfter): the
// longest among those outside quota mode, and when every quota descriptor
// is over and none was asked, the shortest among them (one passing lets
// the request through). A quota descriptor asked about leaves the group's
// wait to the engine.
func blockedWait(app []applied, quotaStops bool) time.Duration {
	var wait, quota time.Duration
	quotaAsked, quotaBlocked := false, false
	for i := range app {
		a := &app[i]
		if a.rl == nil || a.unlimited || a.rl.shadow {
			continue
		}
		if a.quota && a.hit >= 0 {
			quotaAsked = true
		}
		if a.hit >= 0 || !a.over {
			continue
		}
		switch {
		case !a.quota:
			wait = max(wait, a.d.ResetAfter)
		case !quotaBlocked || a.d.ResetAfter < quota:
			quota, quotaBlocked = a.d.ResetAfter, true
		}
	}
	if quotaStops && quotaBlocked && !quotaAsked {
		wait = max(wait, quota)
	}
	return wait
}

// answer turns the decisions into the response, in as few allocations as
// the number of descriptors allows.
func (s *Service) answer(app []applied, sc *scratch) *rlsv3.RateLimitResponse {
	resp, statuses, limits, durs, h := statuses(len(app), !s.opts.NoFields)
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	denied := denies(app)
	if denied {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	grouped, quotaStops := quotaGroup(app)
	items := sc.items[:0]
	binding := -1 // in items
	for i := range app {
		a := &app[i]
		st := &statuses[i]
		st.Code = rlsv3.RateLimitResponse_OK
		resp.Statuses[i] = st
		rl := a.rl
		if a.unlimited {
			st.LimitRemaining = math.MaxUint32
			continue
		}
		if rl == nil {
			continue
		}
		lim := &limits[i]
		lim.Name, lim.RequestsPerUnit, lim.Unit = rl.answerName(), rl.perUnit, rlsv3.RateLimitResponse_RateLimit_Unit(rl.unit)
		st.CurrentLimit = lim
		d := a.d
		a.threshold = d.Limit
		st.LimitRemaining = uint32(min(max(d.Remaining, 0), math.MaxUint32))
		until := d.ResetAfter
		if a.over && a.hit >= 0 {
			until = d.RetryAfter
		}
		st.DurationUntilReset = setDuration(&durs[i], until)
		if rl.shadow {
			continue
		}
		if a.over {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			// A quota descriptor stops the request only with all the
			// others.
			if denied && binding < 0 && (!a.quota || quotaStops) {
				binding = len(items)
			}
		}
		if rl.fields != nil {
			it := fields.Item{Limit: rl.fields, Decision: d}
			if a.quota && grouped {
				it.Group = 1
			}
			items = append(items, it)
		}
	}
	sc.items = items
	if len(items) == 0 || s.opts.NoFields {
		return resp
	}
	var wait time.Duration
	if denied {
		wait = max(sc.res.RetryAfter, blockedWait(app, quotaStops))
	}
	if binding < 0 {
		// Allowed: the limit with the fewest units left comes first.
		binding = 0
		for i := range items {
			if items[i].Decision.Remaining < items[binding].Decision.Remaining {
				binding = i
			}
		}
	}
	sc.out = s.renderer.Render(sc.out[:0], items, binding, denied, wait, s.fields.Load())
	if len(sc.out) == 0 {
		return resp
	}
	var hv []corev3.HeaderValue
	var hvp []*corev3.HeaderValue
	if h == nil && len(sc.out) <= 3 {
		h = new(headers3)
	}
	if h != nil {
		hv, hvp = h.hv[:0], h.hvp[:0]
	}
	if cap(hv) < len(sc.out) {
		hv = make([]corev3.HeaderValue, 0, len(sc.out))
	}
	for _, f := range sc.out {
		hv = append(hv, corev3.HeaderValue{Key: f.Name, Value: f.Value})
	}
	if cap(hvp) < len(hv) {
		hvp = make([]*corev3.HeaderValue, 0, len(hv))
	}
	for i := range hv {
		hvp = append(hvp, &hv[i])
	}
	resp.ResponseHeadersToAdd = hvp
	return resp
}

package rls

import (
	"context"
	"math"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// decideCompat answers a request of a domain in compatibility mode, as
// envoyproxy/ratelimit does: every limited descriptor adds its hits to its
// own counter (a fixed window of its unit, aligned to the epoch), whatever
// the other descriptors say and even when that takes it over the limit,
// and is over the limit when its counter then exceeds requests_per_unit.
// A descriptor whose hits_addend is 0 reads its counter without adding to
// it. The counters are the counting rules' (see countRule): they never
// deny, and what they have left tells the count.
func (s *Service) decideCompat(ctx context.Context, req *rlsv3.RateLimitRequest, app []applied, sc *scratch) (*rlsv3.RateLimitResponse, error) {
	// One engine call, the descriptors in the request's order, as the
	// peer pipelines its INCRBYs: a read (hits_addend 0, a check) sees
	// what the descriptors before it added to the same counter, not what
	// those after it add.
	hits := sc.hits[:0]
	for i := range app {
		a := &app[i]
		if a.rl == nil || a.unlimited {
			continue
		}
		a.hit = len(hits)
		hits = append(hits, limiter.Hit{Rule: a.rl.count, Key: a.key, Cost: max(a.cost, 1), Check: a.cost == 0})
	}
	sc.hits = hits
	if s.opts.PeerCounter != nil && len(hits) > 0 {
		err := s.countPeer(ctx, app, sc)
		if err == nil {
			return s.answerCompat(app), nil
		}
		// The engine decides instead, by the limits' failure policies.
		// Every request fails so while Redis does: the warning passes
		// once a second, so that the log is not flooded at the request
		// rate (the redis_error statistic counts each one).
		sc.storeFailed = true
		if held, ok := s.peerLog.Pass(time.Now()); ok {
			s.log.Warn("rls: envoyproxy/ratelimit's counters", "domain", req.GetDomain(), "err", err, "not_logged_since", held)
		}
	}
	res := &sc.res
	if len(hits) > 0 {
		*res = limiter.Result{Binding: -1, Decisions: res.Decisions[:0], Flags: res.Flags[:0]}
		sc.req = limiter.Request{Front: limiter.FrontRLS, Hits: hits}
		if err := s.eng.Decide(ctx, &sc.req, res); err != nil {
			return nil, err
		}
		sc.storeFailed = sc.storeFailed || res.Degraded != limiter.NotDegraded
	}
	for i := range app {
		if a := &app[i]; a.hit >= 0 {
			countCompat(a, res.Decisions[a.hit])
		}
	}
	return s.answerCompat(app), nil
}

// countCompat works out a descriptor's count from its counting rule's
// decision d, and whether that puts it over its limit.
func countCompat(a *applied, d floodgate.Decision) {
	rpu := int64(a.rl.perUnit)
	a.d, a.threshold = d, rpu
	if !d.Allowed {
		// The store failed and the failure policy refused.
		a.before, a.after, a.over = rpu, rpu+a.cost, true
		return
	}
	after := d.Limit - d.Remaining // a check's Remaining is what is free now
	a.before, a.after, a.over = after-a.cost, after, after > rpu
}

// answerCompat builds envoyproxy/ratelimit's response: a limited
// descriptor has its current_limit (named as configured), limit_remaining
// (0 once over) and duration_until_reset (the whole seconds until its
// window ends); a descriptor in shadow mode is OK whatever its count; an
// unlimited one is OK with limit_remaining 4294967295; the others are OK
// and nothing more.
func (s *Service) answerCompat(app []applied) *rlsv3.RateLimitResponse {
	resp, statuses, limits, durs, _ := statuses(len(app), false)
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	if deniesCompat(app, s.opts.QuotaMode) {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
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
		lim.Name, lim.RequestsPerUnit, lim.Unit = rl.configName, rl.perUnit, rlsv3.RateLimitResponse_RateLimit_Unit(rl.unit)
		st.CurrentLimit = lim
		if a.over {
			if !rl.shadow {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			}
		} else {
			st.LimitRemaining = uint32(int64(rl.perUnit) - a.after)
		}
		st.DurationUntilReset = setDuration(&durs[i], untilReset(rl.unit, a.d.ResetAfter))
	}
	return resp
}

// untilReset is envoyproxy/ratelimit's duration_until_reset: the whole
// seconds until the unit's window ends, from the counter's window (or
// from this machine's clock when the store did not answer).
func untilReset(u Unit, left time.Duration) time.Duration {
	if left <= 0 {
		n := u.seconds()
		left = time.Duration(n-time.Now().Unix()%n) * time.Second
	}
	return (left + time.Second - 1).Truncate(time.Second)
}

// deniesCompat is envoyproxy/ratelimit's overall verdict: over the limit
// when a descriptor not in quota mode is, or when every descriptor in
// quota mode is. With the global QUOTA_MODE every descriptor that is not
// unlimited is in quota mode, those without a limit (none matched, or
// theirs replaced) included; as they are never over the limit, a request
// with one is never over by its quotas.
func deniesCompat(app []applied, global bool) bool {
	quotas, over := 0, 0
	for i := range app {
		a := &app[i]
		if a.unlimited {
			continue
		}
		if a.rl == nil {
			if global {
				quotas++
			}
			continue
		}
		isOver := a.over && !a.rl.shadow
		if a.quota || global {
			quotas++
			if isOver {
				over++
			}
			continue
		}
		if isOver {
			return true
		}
	}
	return quotas > 0 && quotas == over
}

package config

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/floodgate/floodgate/algo"
)

// tenantWords are the tenants of Overload.Tenant besides header:NAME.
var tenantWords = []string{TenantClientIP, TenantAPIKey, TenantPlan, TenantUser}

// TierNames returns the names of the overload control's tiers, most
// critical first.
func (o *Overload) TierNames() []string {
	names := make([]string, len(o.Tiers))
	for i, t := range o.Tiers {
		names[i] = t.Name
	}
	return names
}

// TierIndex returns the index of the tier named name, most critical 0,
// or -1.
func (o *Overload) TierIndex(name string) int {
	for i := range o.Tiers {
		if o.Tiers[i].Name == name {
			return i
		}
	}
	return -1
}

// String describes the overload control in one line, as floodgate check
// prints it.
func (o *Overload) String() string {
	var b strings.Builder
	if a := o.Adaptive; a != nil {
		fmt.Fprintf(&b, "adaptive limit %d..%d from %d", a.Min, a.Max, a.Initial)
	} else {
		fmt.Fprintf(&b, "limit %d in flight", o.Limit)
	}
	if q := o.Queue; q != nil {
		fmt.Fprintf(&b, ", queue %d (%d per tenant, max wait %v)", q.Size, q.PerTenant, q.MaxWait)
	} else {
		b.WriteString(", no queue")
	}
	fmt.Fprintf(&b, ", tenant %s, tiers", o.Tenant)
	for i, t := range o.Tiers {
		sep := " "
		if i > 0 {
			sep = ", "
		}
		fmt.Fprintf(&b, "%s%s", sep, t.Name)
		if t.Reserve > 0 {
			fmt.Fprintf(&b, " (reserve %g)", t.Reserve)
		}
	}
	fmt.Fprintf(&b, "; route tier %s", o.Tier)
	if o.TierHeader != "" {
		fmt.Fprintf(&b, ", tier header %s from trusted proxies", o.TierHeader)
	}
	return b.String()
}

// algoMessage returns an algo error's message without its package's
// prefix and sentinel.
func algoMessage(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// overload validates a route's overload control and fills in its
// defaults.
func (v *validator) overload(o *Overload, path string) {
	switch {
	case o.Adaptive != nil && v.written(path+".limit"):
		v.errorf(path+".adaptive", "limit and adaptive exclude each other: a fixed cap or a learnt one")
	case o.Adaptive == nil && o.Limit <= 0:
		if v.written(path + ".limit") {
			v.errorf(path+".limit", "limit must be at least 1, got %d", o.Limit)
		} else {
			v.errorf(path, "overload needs a limit (a fixed cap on requests in flight) or adaptive")
		}
	}
	if a := o.Adaptive; a != nil {
		ap := path + ".adaptive"
		bad := false
		for _, f := range []struct {
			name string
			n    int
		}{{"min", a.Min}, {"max", a.Max}, {"initial", a.Initial}, {"min_samples", a.MinSamples}} {
			if f.n < 0 {
				v.errorf(ap+"."+f.name, "%s must not be negative, got %d", f.name, f.n)
				bad = true
			}
		}
		switch {
		case bad:
		case a.Max != 0 && a.Max < max(a.Min, 1):
			v.errorf(ap+".max", "max %d is below min %d", a.Max, max(a.Min, 1))
			bad = true
		case a.Initial != 0 && (a.Initial < a.Min || a.Max != 0 && a.Initial > a.Max):
			v.errorf(ap+".initial", "initial %d must be within min and max", a.Initial)
			bad = true
		}
		if a.Window < 0 {
			v.errorf(ap+".window", "window must not be negative, got %v", a.Window)
			bad = true
		}
		if !bad {
			ad, err := algo.NewAdaptive(o.AdaptiveOptions())
			if err != nil {
				v.errorf(ap, "%s", algoMessage(err))
			} else {
				ao := ad.Options()
				a.Min, a.Max, a.Initial, a.MinSamples = ao.Min, ao.Max, ao.Initial, ao.MinSamples
				a.Tolerance, a.Backoff, a.Growth, a.Window = ao.Tolerance, ao.Backoff, ao.Growth, ao.Window
			}
		}
	}
	if q := o.Queue; q != nil {
		qp := path + ".queue"
		switch {
		case q.Size < 0:
			v.errorf(qp+".size", "size must not be negative, got %d", q.Size)
		case q.PerTenant < 0:
			v.errorf(qp+".per_tenant", "per_tenant must not be negative, got %d", q.PerTenant)
		case q.Size > 0 && q.PerTenant > q.Size:
			v.errorf(qp+".per_tenant", "per_tenant %d is above size %d", q.PerTenant, q.Size)
		default:
			if _, err := algo.NewFairQueue[string, struct{}](algo.FairQueueOptions[string]{Total: q.Size, PerTenant: q.PerTenant, MaxWait: q.MaxWait}); err != nil {
				v.errorf(qp, "%s", algoMessage(err))
			} else if q.Size == 0 {
				q.Size = 1024
			}
			if q.PerTenant == 0 {
				q.PerTenant = max(1, q.Size/8)
			}
		}
		if q.MaxWait <= 0 {
			v.errorf(qp+".max_wait", "a queue needs a max_wait above 0 (the longest a request waits)")
		}
	}
	switch h, isHeader := strings.CutPrefix(o.Tenant, KeyHeaderPrefix); {
	case o.Tenant == "":
		o.Tenant = TenantClientIP
	case isHeader && validToken(h):
	case !slices.Contains(tenantWords, o.Tenant):
		v.errorf(path+".tenant", "tenant must be %s, got %q", wordList(append(slices.Clip(tenantWords), KeyHeaderPrefix+"NAME")), o.Tenant)
	}
	if len(o.Tiers) == 0 {
		o.Tiers = DefaultTiers()
	}
	seen := map[string]int{}
	reserves := make([]float64, len(o.Tiers))
	tiersOK := true
	for i, t := range o.Tiers {
		tp := fmt.Sprintf("%s.tiers[%d]", path, i)
		switch j, dup := seen[t.Name]; {
		case t.Name == "":
			v.errorf(tp+".name", "a tier needs a name")
			tiersOK = false
		case dup:
			v.errorf(tp+".name", "tier %q is also tiers[%d]", t.Name, j)
			tiersOK = false
		}
		seen[t.Name] = i
		switch {
		case !(t.Reserve >= 0 && t.Reserve < 1):
			v.errorf(tp+".reserve", "reserve must be a share in [0, 1), got %v", t.Reserve)
			tiersOK = false
		case i == len(o.Tiers)-1 && t.Reserve != 0:
			v.errorf(tp+".reserve", "the lowest tier reserves nothing: there is no tier below it")
			tiersOK = false
		}
		reserves[i] = t.Reserve
	}
	if tiersOK {
		if _, err := algo.NewTiers(reserves...); err != nil {
			v.errorf(path+".tiers", "%s", algoMessage(err))
		}
	}
	switch {
	case o.Tier == "" && o.TierIndex(TierDefault) >= 0:
		o.Tier = TierDefault
	case o.Tier == "":
		o.Tier = o.Tiers[len(o.Tiers)-1].Name
	case o.TierIndex(o.Tier) < 0:
		v.errorf(path+".tier", "unknown tier %q (the route's tiers are %s)", o.Tier, wordList(o.TierNames()))
	}
	if o.TierHeader != "" {
		if !validToken(o.TierHeader) {
			v.errorf(path+".tier_header", "%q is not a header name", o.TierHeader)
		} else {
			o.TierHeader = http.CanonicalHeaderKey(o.TierHeader)
		}
	}
}

// AdaptiveOptions returns the options of the adaptive limit (zero when
// the cap is fixed).
func (o *Overload) AdaptiveOptions() algo.AdaptiveOptions {
	a := o.Adaptive
	if a == nil {
		return algo.AdaptiveOptions{}
	}
	return algo.AdaptiveOptions{Min: a.Min, Max: a.Max, Initial: a.Initial, Tolerance: a.Tolerance,
		Backoff: a.Backoff, Growth: a.Growth, Window: a.Window, MinSamples: a.MinSamples}
}

// planTiers checks that the tier of each plan is a tier of every route
// with overload control that the plan covers.
func (v *validator) planTiers() {
	for i := range v.f.Plans {
		p := &v.f.Plans[i]
		if p.Tier == "" {
			continue
		}
		for j := range v.f.Routes {
			r := &v.f.Routes[j]
			if r.Overload == nil || len(p.Routes) > 0 && !slices.Contains(p.Routes, r.Name) {
				continue
			}
			if r.Overload.TierIndex(p.Tier) < 0 {
				v.errorf(fmt.Sprintf("plans[%d].tier", i), "tier %q is not one of route %q's tiers (%s)", p.Tier, r.Name, wordList(r.Overload.TierNames()))
				break
			}
		}
	}
}

// queuedReservations refuses a limit that holds a reservation (count_on or
// actual) for a request in flight, and may apply on a route whose overload
// queue holds a request for as long as, or longer than, the reservation
// lives: a request waiting in the queue holds its reservation (the limit
// counts it while it waits), which would expire at its estimate before
// the request is forwarded, shed or left, and keep that charge where it
// is to be given back or settled at less. Taking the reservation after the
// queue would let requests that wait race past the limit.
func (v *validator) queuedReservations() {
	pr := v.f.Server.PathReading()
	for i := range v.f.Limits {
		l := &v.f.Limits[i]
		if l.Actual == nil && len(l.CountOn) == 0 || l.ReserveTTL <= 0 {
			continue
		}
		for j := range v.f.Routes {
			r := &v.f.Routes[j]
			if r.Overload == nil || r.Overload.Queue == nil || r.Overload.Queue.MaxWait < l.ReserveTTL || !mayApply(&l.Match, r, pr) {
				continue
			}
			v.errorf(fmt.Sprintf("limits[%d].reserve_ttl", i), "reserve_ttl %v is not longer than the max_wait %v of the overload queue of route %q "+
				"(routes[%d].overload.queue.max_wait), where the limit applies: a request waiting there would have its reservation "+
				"expire at its estimate and keep that charge when it is shed or left, or its answer settles less; "+
				"make reserve_ttl longer than max_wait (or name the limit's routes in its match)",
				l.ReserveTTL, r.Overload.Queue.MaxWait, r.Name, j)
			break
		}
	}
}

// mayApply reports whether a limit of match m may apply to a request on
// route r: whether some request could match both r's match and m, their
// paths read as the gateway reads them (pr: a path and the patterns
// without a final ".format" under server.format_suffix: ignore, in lower
// case under path_matching: case_insensitive). It errs towards yes (a
// request on r might be matched by an earlier route).
//
// The readings of an escaped slash (server.escaped_slash) add nothing:
// under segment and decoded, a request is routed and limited by one
// reading of its path; under both, the limits match either reading but
// the request is refused (400, before any limit) unless both readings
// choose r, whose patterns then match the reading the limit matched. In
// every case one path, as read, matches both r's and m's patterns.
func mayApply(m *Match, r *Route, pr PathReading) bool {
	if len(m.Routes) > 0 && !slices.Contains(m.Routes, r.Name) {
		return false
	}
	if len(m.Stages) > 0 && !slices.Contains(m.Stages, r.Stage) {
		return false
	}
	if len(m.Methods) > 0 && len(r.Match.Methods) > 0 && !methodsMeet(m.Methods, r.Match.Methods) {
		return false
	}
	if len(m.Hosts) > 0 && len(r.Match.Hosts) > 0 && !anyMeet(m.Hosts, r.Match.Hosts, hostsMeet) {
		return false
	}
	pathsMeet := func(a, b string) bool { return patternsMeet(pr.Pattern(a), pr.Pattern(b)) }
	if len(m.Paths) > 0 && len(r.Match.Paths) > 0 && !anyMeet(m.Paths, r.Match.Paths, pathsMeet) {
		return false
	}
	return true
}

// methodsMeet reports whether the lists share a method; HEAD meets GET,
// which a server may answer it with.
func methodsMeet(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y || (x == "HEAD" || y == "HEAD") && (x == "GET" || y == "GET") {
				return true
			}
		}
	}
	return false
}

// anyMeet reports whether some pattern of a meets some pattern of b.
func anyMeet(a, b []string, meet func(x, y string) bool) bool {
	for _, x := range a {
		for _, y := range b {
			if meet(x, y) {
				return true
			}
		}
	}
	return false
}

// hostsMeet reports whether some host matches both host patterns (a name,
// or *.domain for any name below it).
func hostsMeet(a, b string) bool {
	as, aw := strings.CutPrefix(a, "*")
	bs, bw := strings.CutPrefix(b, "*")
	switch {
	case aw && bw:
		return strings.HasSuffix(as, bs) || strings.HasSuffix(bs, as)
	case aw:
		return len(b) > len(as) && strings.HasSuffix(b, as)
	case bw:
		return len(a) > len(bs) && strings.HasSuffix(a, bs)
	}
	return a == b
}

// patternsMeet reports whether some path matches both path patterns, as
// the gateway matches them (PathReading.Pattern, beside PathReading.Path).
// It errs towards yes where a final /** meets nothing but a segment that
// no path as read spells (a last segment with a ".format" under
// format_suffix: ignore).
func patternsMeet(a, b string) bool {
	return segmentsMeet(strings.Split(strings.TrimPrefix(a, "/"), "/"), strings.Split(strings.TrimPrefix(b, "/"), "/"))
}

func segmentsMeet(a, b []string) bool {
	for {
		switch {
		case len(a) > 0 && a[0] == "**", len(b) > 0 && b[0] == "**":
			return true
		case len(a) == 0 || len(b) == 0:
			return len(a) == len(b)
		case !segmentMeets(a[0], b[0]):
			return false
		}
		a, b = a[1:], b[1:]
	}
}

// segmentMeets reports whether a path segment matches both segment
// patterns: * and {name} match any one segment but an empty one (the
// root's, "/"), a literal segment itself alone.
func segmentMeets(a, b string) bool {
	wild := func(s string) bool { return s == "*" || strings.HasPrefix(s, "{") }
	switch {
	case wild(a) && wild(b):
		return true
	case wild(a):
		return b != ""
	case wild(b):
		return a != ""
	}
	return a == b
}

package policy

import (
	"fmt"
	"strings"
)

// LimitMatch says whether one limit of a policy applies to a request, and
// why.
type LimitMatch struct {
	// Limit is the limit.
	Limit *Limit
	// Matched reports whether Match gave the request a hit of this limit.
	Matched bool
	// Hit is the index of the limit's hit in Match.Hits (-1 when not
	// matched).
	Hit int
	// Key is the counter key of a matched limit.
	Key string
	// Reason says what the request matched, or the first condition it did
	// not meet: the route, method, host, path or stage, the API key and
	// its plan, or a part of the limit's key the request lacks.
	Reason string
	// Missing names the key part the request lacks, when that is why the
	// limit does not apply (user, api_key, header:X-Tenant).
	Missing string
}

// Explanation is a request matched against every limit of a policy.
type Explanation struct {
	// Limits holds every limit of the policy, in evaluation order.
	Limits []LimitMatch
	// Forbidden, when set, says why the request is refused with 403 once
	// the limits that need no API key (and the unknown-key limit) are
	// charged.
	Forbidden string
}

// Exempt follows a hit taken out of Match.Hits or moved in it: the limit
// of hit i is exempt (out: the access list's allow entry takes it out), or
// its hit is now at index to.
func (e *Explanation) Exempt(i, to int, out bool) {
	for j := range e.Limits {
		lm := &e.Limits[j]
		if lm.Hit != i || !lm.Matched {
			continue
		}
		if out {
			lm.Matched, lm.Hit, lm.Key = false, -1, ""
			lm.Reason = "the client's address is on the allow list, exempt from this limit"
		} else {
			lm.Hit = to
		}
		return
	}
}

// Refuse follows a request refused before any limit counts it (400 for
// an escaped slash, a field sent twice): no limit applies, each that
// Match gave a hit says why it is not checked, and the request is not
// refused for its API key (Forbidden) but for why.
func (e *Explanation) Refuse(why string) {
	e.Forbidden = ""
	for j := range e.Limits {
		lm := &e.Limits[j]
		if lm.Matched {
			lm.Matched, lm.Hit, lm.Key = false, -1, ""
			lm.Reason = "not checked: " + why
		}
	}
}

// Explain matches r as Match does (into m, which then holds the same
// hits) and says, for every limit of the policy in evaluation order,
// whether it applies to r and why. Whether a limit applies is Match's
// answer; the reason a limit does not is read off the request as Match
// read it (its path case-folded, without its format suffix, in the
// readings of an escaped slash that the policy's server block picks).
func (p *Policy) Explain(r *Request, m *Match) Explanation {
	// The reasons read the request as Match read it: its path lower-cased
	// and without its format suffix where the file says so, in the
	// reading (or both) of an escaped slash that server.escaped_slash
	// picks.
	rq := p.match(r, m)
	var e Explanation
	key, _, presented := p.apiKey(r)
	if m.Forbidden {
		e.Forbidden = p.forbidden(m, key, presented)
	}
	for _, l := range p.ordered {
		lm := LimitMatch{Limit: l, Hit: -1}
		for i, ml := range m.Limits {
			if ml == l {
				lm.Matched, lm.Hit, lm.Key = true, i, m.Hits[i].Key
				break
			}
		}
		switch {
		case lm.Matched:
			lm.Reason = p.matchedBecause(l, m)
		case l == p.unknownKey:
			lm.Reason = "counts only requests refused for a missing or unknown API key"
		case m.Forbidden && (l.Scope == ScopePlan || l.needsKey):
			lm.Reason = "not checked: " + e.Forbidden
		case l.Scope == ScopePlan:
			lm.Reason, lm.Missing = p.planMiss(l, m, key, presented)
		case l.Stage != "":
			if m.Stage == "" {
				lm.Reason = "the request has no stage"
			} else {
				lm.Reason = fmt.Sprintf("the request is on stage %q", m.Stage)
			}
		default:
			if why := l.match.why(&rq); why != "" {
				lm.Reason = why
			} else {
				lm.Reason, lm.Missing = missingPart(l, r, m)
			}
		}
		e.Limits = append(e.Limits, lm)
	}
	return e
}

// forbidden says why a Forbidden request is refused.
func (p *Policy) forbidden(m *Match, key *Key, presented bool) string {
	route := m.Route.Name
	switch {
	case !presented:
		return fmt.Sprintf("route %q requires an API key and the request has none (403)", route)
	case key == nil:
		return fmt.Sprintf("route %q requires an API key and key %s is not configured (403)", route, m.KeyID)
	}
	return fmt.Sprintf("route %q requires an API key and plan %q of key %q does not cover it (403)", route, key.plan.name, key.name)
}

// matchedBecause describes what a matched limit matched.
func (p *Policy) matchedBecause(l *Limit, m *Match) string {
	var why string
	switch {
	case l.Scope == ScopePlan:
		why = fmt.Sprintf("key %q is in plan %q", m.KeyName, l.Plan)
	case l.Stage != "":
		why = fmt.Sprintf("the request is on stage %q", l.Stage)
	case l == p.account:
		why = "every request"
	case l == p.unknownKey:
		why = "the request is refused for its API key: counted per address"
	case l.MatchText == "*":
		why = "matches every request"
	default:
		why = "matches " + l.MatchText
	}
	if l.Shadow {
		why += "; shadow: counted, never blocks"
	}
	if l.Deferred() {
		why += fmt.Sprintf("; charged after the response when its status is one of %v", l.CountOn)
	}
	return why
}

// planMiss says why a plan limit does not apply.
func (p *Policy) planMiss(l *Limit, m *Match, key *Key, presented bool) (reason, missing string) {
	switch {
	case !presented:
		return "the request has no API key", "api_key"
	case key == nil:
		return fmt.Sprintf("API key %s is not configured", m.KeyID), ""
	case key.plan.name != l.Plan:
		return fmt.Sprintf("key %q is in plan %q", key.name, key.plan.name), ""
	case m.Route == nil:
		return fmt.Sprintf("no route matched; plan %q covers only some routes", l.Plan), ""
	}
	return fmt.Sprintf("plan %q does not cover route %q", l.Plan, m.Route.Name), ""
}

// missingPart says which part of a limit's key the request lacks.
func missingPart(l *Limit, r *Request, m *Match) (reason, missing string) {
	if r.UserPending && r.User == "" && l.needsUser {
		return "the user is not known yet (a token not verified)", "user"
	}
	for _, part := range l.Key {
		switch part.Kind {
		case KeyUser:
			if r.User == "" {
				return "the request has no user", part.String()
			}
		case KeyAPIKey:
			if m.KeyID == "" {
				return "the request has no API key", part.String()
			}
		case KeyHeader:
			if r.header(part.Header) == "" {
				return fmt.Sprintf("the request has no %s header", part.Header), part.String()
			}
		}
	}
	return "not matched", ""
}

// why returns the first condition of the match that r does not meet, or
// "" when it matches.
func (mt *matcher) why(r *req) string {
	if mt.match(r) {
		return ""
	}
	if len(mt.methods) > 0 && !contains(mt.methods, r.method) {
		return fmt.Sprintf("method %s is not %s", r.method, strings.Join(mt.methods, " or "))
	}
	if len(mt.stages) > 0 && !contains(mt.stages, r.stage) {
		if r.stage == "" {
			return fmt.Sprintf("the request has no stage (the limit is for stage %s)", strings.Join(mt.stages, " or "))
		}
		return fmt.Sprintf("stage %q is not %s", r.stage, strings.Join(mt.stages, " or "))
	}
	if len(mt.routes) > 0 && !contains(mt.routes, r.route) {
		if r.route == "" {
			return fmt.Sprintf("no route matched (the limit is for route %s)", strings.Join(mt.routes, " or "))
		}
		return fmt.Sprintf("route %q is not %s", r.route, strings.Join(mt.routes, " or "))
	}
	only := matcher{hosts: mt.hosts}
	if len(mt.hosts) > 0 && !only.match(r) {
		if r.host == "" {
			return fmt.Sprintf("the request has no host (the limit is for %s)", strings.Join(mt.hosts, " or "))
		}
		return fmt.Sprintf("host %q is not %s", r.host, strings.Join(mt.hosts, " or "))
	}
	if r.alt != "" {
		return fmt.Sprintf("path %q (or %q, its escaped slash kept) does not match %s", r.path, r.alt, strings.Join(mt.src.Paths, " or "))
	}
	return fmt.Sprintf("path %q does not match %s", r.path, strings.Join(mt.src.Paths, " or "))
}

package gateway

import (
	"context"
	"net/http"
	"net/netip"
	"time"

	"github.com/floodgate/floodgate/fields"
)

// Gatekeeper screens requests once they are matched, before any of their
// limits is charged: an address on a deny list, a key in the penalty box.
// It is told how each request it let through was answered, so that it can
// count offences. internal/app's keeper (packages access and penalty) is
// one. Methods are called on the request path: they must be fast and safe
// for concurrent use.
type Gatekeeper interface {
	// Screen returns 0 to let a matched request go on, or the status to
	// refuse it with: 403 (a denied address) or 429 with the wait until
	// its ban ends. It may take out the hits of the limits the request is
	// exempt from (Match.Exempt).
	Screen(m *Match) (status int, retryAfter time.Duration)
	// Outcome is told the answer of a request Screen let through: refused
	// reports a refusal on a limit, whose key holds the identities
	// m.RefusedBy (a refusal is an offence of those alone), or by the
	// route's overload control (a shed 503: m.RefusedBy holds none, as
	// for a limit that clients share, since another client's flood can
	// take the capacity), status the answer's status (0: none was
	// written). ctx is the request's, which
	// may have ended (the answer is written, or its client left): work
	// that must still be done detaches from it (context.WithoutCancel)
	// and takes at most within. A gatekeeper with nothing to count
	// returns at once, so that the request costs it nothing more.
	Outcome(ctx context.Context, within time.Duration, m *Match, refused bool, status int)
}

// UserScreener is a Gatekeeper that screens requests by their user, or
// counts their offences by it (a penalty-box rule keyed by user). The
// gateway then verifies a token a request presents before the request
// goes on, on every route, once the limits that need no user let it
// through: where no limit counts per user the token would otherwise never
// be verified, and its user never screened.
type UserScreener interface {
	// ScreensUsers reports whether the gatekeeper needs requests' users
	// now (it is asked for every request that presents a token it has
	// not verified).
	ScreensUsers() bool
}

// screensUsers reports whether the gatekeeper needs the users of requests.
func (g *Gateway) screensUsers() bool {
	us, ok := g.keeper.(UserScreener)
	return ok && us.ScreensUsers()
}

// StatusCounter is a Gatekeeper that counts answers by their status (a
// penalty-box rule with count_on, such as failed logins). The upstream's
// request of a client that leaves before its status line then goes on
// until the status is known, on the net/http engine as on the edge
// engine, so that a client cannot keep an attempt it made from being
// counted by hanging up once it is sent.
type StatusCounter interface {
	// CountsStatuses reports whether the gatekeeper counts answers by
	// their status now.
	CountsStatuses() bool
}

// countsStatuses reports whether the gatekeeper counts answers by their
// status.
func (g *Gateway) countsStatuses() bool {
	sc, ok := g.keeper.(StatusCounter)
	return ok && sc.CountsStatuses()
}

// screen asks the gatekeeper about st's request and answers it when it
// refuses it; it reports whether it did.
func (g *Gateway) screen(x Exchange, st *Flow) bool {
	status, wait := g.keeper.Screen(&st.m)
	if status == 0 {
		return false
	}
	st.screened = true
	g.rejected(st, "", status)
	g.refusedBeforeLimit(st, status)
	if status == http.StatusForbidden {
		x.Answer(status, bodyForbidden, false)
		return true
	}
	secs := max(int64((wait+time.Second-1)/time.Second), 1)
	st.out = append(st.out[:0], fields.Field{Name: fields.NameRetryAfter, Value: fields.Itoa(secs)})
	x.SetFields(st.out)
	x.Answer(status, bodyTooMany, false)
	return true
}

// outcome tells the gatekeeper how a request it let through was answered.
// A request its route's overload control shed is refused by no identity
// of its own: its 503 is the gateway's, for capacity clients share, and
// offends no rule (the upstream's own 503 does, where a rule counts it).
func (g *Gateway) outcome(x Exchange, st *Flow) {
	status, _ := x.Answered()
	refused := st.refused
	if s := st.ovl.shed; s != "" && s != ShedClientGone {
		refused = true
	}
	g.keeper.Outcome(x.Context(), g.relTO, &st.m, refused, status)
}

// AddressList is an allow and deny list of client addresses (an
// access.List): the addresses it refuses, and the limits an address is
// exempt from.
type AddressList interface {
	Denied(a netip.Addr) bool
	Exempt(a netip.Addr) (all bool, names []string)
}

// ScreenByList screens m by l, as every Gatekeeper with access lists does:
// 403 when l denies the client's address and deny is set, else 0, with
// the limits l exempts the address from taken out of m (Exempt).
func ScreenByList(l AddressList, m *Match, deny bool) int {
	if !m.ClientIP.IsValid() {
		return 0
	}
	if deny && l.Denied(m.ClientIP) {
		return http.StatusForbidden
	}
	if all, names := l.Exempt(m.ClientIP); all || len(names) > 0 {
		m.Exempt(all, names)
	}
	return 0
}

// Exempt takes out of m the hits of the limits a request is exempt from:
// every one (all), or those named.
func (m *Match) Exempt(all bool, names []string) {
	if !all && len(names) == 0 {
		return
	}
	keep := 0
	for i := range m.Hits {
		name := m.Hits[i].Rule.Name()
		out := all
		for _, n := range names {
			out = out || n == name
		}
		if m.Trace != nil {
			m.Trace.Exempt(i, keep, out)
		}
		if out {
			continue
		}
		m.Hits[keep] = m.Hits[i]
		if i < len(m.Fields) {
			m.Fields[keep] = m.Fields[i]
		}
		if i < len(m.CountOn) {
			m.CountOn[keep] = m.CountOn[i]
		}
		if i < len(m.Costs) {
			m.Costs[keep] = m.Costs[i]
		}
		if i < len(m.Limits) {
			m.Limits[keep] = m.Limits[i]
		}
		keep++
	}
	clip := func(n int) int { return min(n, keep) }
	clear(m.Hits[keep:])
	m.Hits = m.Hits[:keep]
	if len(m.Fields) > keep {
		clear(m.Fields[keep:])
		m.Fields = m.Fields[:clip(len(m.Fields))]
	}
	if len(m.CountOn) > keep {
		clear(m.CountOn[keep:])
		m.CountOn = m.CountOn[:keep]
	}
	if len(m.Costs) > keep {
		clear(m.Costs[keep:])
		m.Costs = m.Costs[:keep]
	}
	if len(m.Limits) > keep {
		clear(m.Limits[keep:])
		m.Limits = m.Limits[:keep]
	}
}

package gateway

import (
	"net/netip"
	"strings"

	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// What the upstream is told of a request (Match.Forward, from the policy's
// server.upstream or the route's settings): every copy of the identity
// headers a client sent is removed, whether the gateway sets them or not,
// and the credentials with strip_credentials; then the gateway sets the
// headers it knows. It happens in the one admission flow, just before a
// request is passed on, whatever engine serves it.

// handOn hands the request on through x, after telling the upstream
// what Match.Forward says; decided reports that st.res holds the engine's
// verdict on the request's hits (for the remaining units).
func (g *Gateway) handOn(x Exchange, st *Flow, rec *Recorder, decided bool) bool {
	if name := st.m.UntrustedUser; name != "" {
		x.DelHeader(name) // believed from a trusted proxy only
	}
	if f := st.m.Forward; f != nil {
		m := &st.m
		// The user may be a view of a header field the removals below
		// let the engine write over (the edge engine reuses the bytes).
		m.User = strings.Clone(m.User)
		for _, name := range f.Remove {
			x.DelHeader(name)
		}
		set := func(name, value string) {
			if name != "" && value != "" {
				x.SetHeader(name, value)
			}
		}
		set(f.KeyName, m.KeyID)
		set(f.Plan, m.Plan)
		set(f.User, m.User)
		if f.ClientIP != "" && m.ClientIP.IsValid() {
			x.SetHeader(f.ClientIP, addrText(m.ClientIP))
		}
		if f.Remaining != "" && decided {
			if n, ok := fewestRemaining(&st.res); ok {
				x.SetHeader(f.Remaining, fields.Itoa(n))
			}
		}
	}
	return x.Pass(st, rec)
}

// addrText formats an address as an upstream reads it: IPv4 unmapped.
func addrText(a netip.Addr) string { return a.Unmap().String() }

// fewestRemaining returns the fewest units left among the decisions of
// res that are not shadow ones.
func fewestRemaining(res *limiter.Result) (int64, bool) {
	var n int64
	found := false
	for i := range res.Decisions {
		if i < len(res.Flags) && res.Flags[i]&limiter.Shadow != 0 {
			continue
		}
		if r := res.Decisions[i].Remaining; !found || r < n {
			n, found = r, true
		}
	}
	return n, found
}

// refusalOf returns the refusal of a denial whose binding hit is i: the
// binding limit's own, else the route's (or the server's), else nil.
func refusalOf(m *Match, i int) *policy.Refusal {
	if i >= 0 && i < len(m.Limits) && m.Limits[i] != nil && m.Limits[i].Refusal != nil {
		return m.Limits[i].Refusal
	}
	return m.Refusal
}

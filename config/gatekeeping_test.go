package config

import (
	"net/netip"
	"strings"
	"testing"
)

// TestGatekeepingSettings: identity headers, refusals, access lists and
// bans are read with their defaults, and what is wrong in them is reported
// at its position.
func TestGatekeepingSettings(t *testing.T) {
	f, err := Parse("g.yaml", []byte(`
server:
  upstream:
    identity_headers: {key_name: X-Floodgate-Key, user: X-Floodgate-User, client_ip: X-Floodgate-Client}
    strip_credentials: true
  refusal: {status: 503, body: "busy", content_type: text/plain, headers: [{name: X-Why, value: slow down}]}
  access:
    deny: [203.0.113.0/24, "2001:db8::1"]
    allow: [{networks: [10.0.0.0/8], exempt: [per-ip]}, {networks: [127.0.0.1], exempt: [all]}]
  bans:
    - {name: flood, after: 10, within: 1m, ban: 5m, max_ban: 1h}
    - {name: logins, key: user, after: 5, within: 10m, ban: 15m, count_on: [401]}
routes:
  - {name: r, upstream: none, strip_credentials: false, refusal: {body: '{"m":1}'}}
limits:
  - {name: per-ip, rate: 5, refusal: {status: 429, headers: [{name: X-Limit, value: per-ip}]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Server
	if s.Refusal.Status != 503 || s.Refusal.ContentType != "text/plain" || f.Routes[0].Refusal.ContentType != "application/json" || f.Routes[0].Refusal.Status != 429 {
		t.Errorf("refusals %+v %+v", s.Refusal, f.Routes[0].Refusal)
	}
	if got := s.Access.DenyPrefixes; len(got) != 2 || got[1] != netip.MustParsePrefix("2001:db8::1/128") {
		t.Errorf("deny %v", got)
	}
	if s.Access.MaxEntries != DefaultAccessMaxEntries || len(s.Access.Allow[1].Prefixes) != 1 {
		t.Errorf("access %+v", s.Access)
	}
	if b := s.Bans[0]; b.Key != KeyClientIP || b.Growth != 2 || len(b.CountOn) != 0 {
		t.Errorf("ban defaults %+v", b)
	}
	if b := s.Bans[1]; b.MaxBan != b.Ban || b.CountOn[0] != 401 {
		t.Errorf("ban %+v", b)
	}

	_, err = Parse("g.yaml", []byte(`server:
  access:
    deny: [203.0.113.7/24, 300.1.2.3, "::ffff:10.0.0.0/104"]
    allow: [{networks: [10.0.0.0/33], exempt: [nope]}]
  refusal: {status: 418, headers: [{name: Retry-After, value: "9"}]}
  upstream: {identity_headers: {user: Authorization, plan: "bad name"}}
  bans: [{name: b, key: route, after: 0, within: 0s, ban: 1m, max_ban: 1s}]
`))
	for _, want := range []string{
		"g.yaml:3:12: server.access.deny[0]: 203.0.113.7/24 has host bits set; did you mean 203.0.113.0/24?",
		`g.yaml:3:28: server.access.deny[1]: "300.1.2.3" is not a CIDR or an IP address`,
		"server.access.deny[2]: ::ffff:10.0.0.0/104 is an IPv4-mapped network",
		`g.yaml:4:25: server.access.allow[0].networks[0]: "10.0.0.0/33" is not a CIDR`,
		`server.access.allow[0].exempt[0]: unknown limit "nope"`,
		"server.refusal.status: a refusal's status is 429 or 503, got 418",
		"server.refusal.headers[0].name: Retry-After is set by the gateway itself",
		"server.upstream.identity_headers.user: Authorization cannot carry an identity",
		`server.upstream.identity_headers.plan: "bad name" is not a valid header name`,
		`server.bans[0].key: key must be client_ip, api_key or user, got "route"`,
		"server.bans[0].after: after must be at least 1",
		"server.bans[0].within: within must be a positive duration",
		"server.bans[0].max_ban: max_ban (1s) must be at least ban (1m0s)",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in\n%v", want, err)
		}
	}
}

// TestRefusalCannotReplaceTheGatewaysFields attacks the fields of the
// gateway's answers with the file: a refusal's header named as the binding
// limit's field (server.headers.binding_limit), which replaced the name of
// the limit that refused with its own value, and a binding_limit naming a
// field the gateway sets itself, which put the limit's name into it
// (Transfer-Encoding: per-ip broke the framing of every refusal on the
// net/http engine). Each is refused at its position; a binding_limit of a
// name of its own, beside refusal headers of other names, is taken.
func TestRefusalCannotReplaceTheGatewaysFields(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`server:
  headers: {binding_limit: X-Binding-Limit}
  refusal: {headers: [{name: x-binding-limit, value: nobody}]}
limits: [{name: l, rate: 1}]
`, "r.yaml:3:30: server.refusal.headers[0].name: X-Binding-Limit is set by the gateway itself (server.headers.binding_limit)"},
		{`server:
  headers: {binding_limit: X-Binding-Limit}
limits: [{name: l, rate: 1, refusal: {headers: [{name: X-Binding-Limit, value: nobody}]}}]
`, "limits[0].refusal.headers[0].name: X-Binding-Limit is set by the gateway itself (server.headers.binding_limit)"},
	} {
		if _, err := Parse("r.yaml", []byte(tc.src)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want %q, got %v", tc.want, err)
		}
	}
	for _, name := range []string{"Transfer-Encoding", "transfer-encoding", "Content-Length", "Content-Type", "Retry-After",
		"RateLimit", "RateLimit-Policy", "X-RateLimit-Remaining", "Connection", "Date"} {
		src := "server:\n  headers: {binding_limit: " + name + "}\nlimits: [{name: l, rate: 1}]\n"
		want := "r.yaml:2:28: server.headers.binding_limit: " + httpCanonical(name) + " is set by the gateway itself"
		if _, err := Parse("r.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("binding_limit %s: want %q, got %v", name, want, err)
		}
	}
	if _, err := Parse("r.yaml", []byte(`server:
  headers: {binding_limit: Floodgate-Limit}
  refusal: {headers: [{name: X-Why, value: slow down}]}
limits: [{name: l, rate: 1, refusal: {headers: [{name: Cache-Control, value: no-store}]}}]
`)); err != nil {
		t.Errorf("a binding_limit of its own beside other refusal headers: %v", err)
	}
}

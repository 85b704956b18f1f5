package policy_test

import (
	"testing"

	"github.com/floodgate/floodgate/policy"
)

// TestLimitIdentities: a limit's Identities are the identities its key
// holds (the client's address, the API key, the user), computed when the
// policy is compiled; a limit every client shares (global, per route, per
// stage, per plan, per header) holds none.
func TestLimitIdentities(t *testing.T) {
	p := compile(t, `
plans: [{name: gold, rate: 10, quota: {limit: 1000, period: DAY}}]
routes:
  - {name: api, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:9"}
limits:
  - {name: per-ip, rate: 10}
  - {name: per-ip-route, key: [client_ip, route], rate: 10}
  - {name: per-key, key: api_key, rate: 10}
  - {name: per-key-ip, key: [api_key, client_ip], rate: 10}
  - {name: per-user, key: user, rate: 10}
  - {name: per-route, key: route, rate: 10}
  - {name: per-stage, key: stage, rate: 10}
  - {name: per-plan, key: plan, rate: 10}
  - {name: per-tenant, key: "header:X-Tenant", rate: 10}
  - {name: everyone, key: global, scope: global, rate: 10}
`)
	want := map[string]policy.Identities{
		"per-ip":       policy.IdentityClientIP,
		"per-ip-route": policy.IdentityClientIP,
		"per-key":      policy.IdentityAPIKey,
		"per-key-ip":   policy.IdentityAPIKey | policy.IdentityClientIP,
		"per-user":     policy.IdentityUser,
		"per-route":    0,
		"per-stage":    0,
		"per-plan":     0,
		"per-tenant":   0,
		"everyone":     0,
		"gold.rate":    policy.IdentityAPIKey,
		"gold.quota":   policy.IdentityAPIKey,
	}
	for name, ids := range want {
		l, ok := p.Limit(name)
		if !ok {
			t.Errorf("no limit %s", name)
			continue
		}
		if l.Identities != ids {
			t.Errorf("%s (key %v): identities %03b, want %03b", name, l.Key, l.Identities, ids)
		}
	}
	if got := p.UnknownKeyLimit().Identities; got != policy.IdentityClientIP {
		t.Errorf("unknown-key limit: identities %03b, want the client's address", got)
	}
	if !policy.IdentityClientIP.Has(policy.IdentityClientIP) || (policy.IdentityAPIKey | policy.IdentityUser).Has(policy.IdentityClientIP) ||
		policy.Identities(0).Has(0) {
		t.Error("Has")
	}
}

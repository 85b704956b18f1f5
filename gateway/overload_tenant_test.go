package gateway

import (
	"net/http"
	"testing"
)

// TestOverloadIPv6TenantIsItsPrefix: on a route whose tenants are its
// clients' addresses (tenant: client_ip, the default), an IPv6 client is
// the tenant of its /64, as the limits key it: a client that holds a /64,
// and so can send each request from an address of its own, is one tenant
// with one backlog (per_tenant), not as many tenants as its addresses.
// Behind a trusted proxy, with a backlog of one: a second address of the
// same /64 is refused (tenant_full) while the first waits, and an address
// of another /64 waits beside it.
func TestOverloadIPv6TenantIsItsPrefix(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		h := startHeldFront(t, front, "server:\n  trusted_proxies: [127.0.0.1/32]\n"+overloadPolicy(`
limit: 1
tiers: [{name: default}]
queue: {size: 4, per_tenant: 1, max_wait: 30s}`))
		const xff = "X-Forwarded-For"
		h.send(t, "held", xff, "2001:db8:0:9::1")
		pollUntil(t, "1 in flight", func() bool { return h.u.now.Load() == 1 })
		h.send(t, "first", xff, "2001:db8:0:1::1")
		pollUntil(t, "1 queued", func() bool { return overloadState(h.g).Queued == 1 })
		h.send(t, "same-prefix", xff, "2001:db8:0:1:ffff::2")
		pollUntil(t, "the second address refused or waiting", func() bool {
			return h.obs.get(ShedTenantFull) == 1 || overloadState(h.g).Queued == 2
		})
		if s := overloadState(h.g); s.Queued != 1 || h.obs.get(ShedTenantFull) != 1 {
			t.Fatalf("another address of the waiting client's /64: %d queued, %d shed as tenant_full; want it refused as tenant_full",
				s.Queued, h.obs.get(ShedTenantFull))
		}
		h.send(t, "other-prefix", xff, "2001:db8:0:2::1")
		pollUntil(t, "2 queued", func() bool { return overloadState(h.g).Queued == 2 })
		answers := h.release()
		want := map[string]int{"held": http.StatusOK, "first": http.StatusOK, "same-prefix": http.StatusServiceUnavailable, "other-prefix": http.StatusOK}
		for who, code := range want {
			if answers[who] != code {
				t.Errorf("%s: status %d, want %d (all: %v)", who, answers[who], code, answers)
			}
		}
	})
}

package gateway

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
)

// TestOverloadTierHeaderOnce: the tier header is believed from a trusted
// proxy, and a proxy that adds its own line (Envoy's
// request_headers_to_add appends by default, HAProxy's add-header too)
// leaves the client's copy first. The gateway read the first line, so a
// client that sent "X-Priority: critical" took the critical tier's
// reserve past the proxy's "sheddable". A request carrying the tier
// header more than once is refused with 400 and reaches no upstream, as
// one repeating the tenant's field is; once, it is read as before.
func TestOverloadTierHeaderOnce(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		hold := make(chan struct{})
		var reached atomic.Int64
		h := func(w http.ResponseWriter, r *http.Request) {
			reached.Add(1)
			if r.URL.Path == "/hold" {
				<-hold
			}
			_, _ = io.WriteString(w, "ok")
		}
		// The ceiling of sheddable is 2 − ⌈2·0.5⌉ = 1; critical's is 2.
		src := "server:\n  trusted_proxies: [127.0.0.1/32, \"::1/128\"]\n" + overloadPolicy(`
limit: 2
tier_header: X-Priority
tier: sheddable
tiers:
  - {name: critical, reserve: 0.5}
  - {name: sheddable}`)
		g, base, c := overloadFront(t, front, src, h)
		held := getLater(t, c, base+"/hold")
		pollUntil(t, "1 in flight", func() bool { return overloadState(g).Inflight == 1 })
		// Admitted is not yet forwarded: the count below starts once the
		// held request is at the upstream.
		pollUntil(t, "the held request at the upstream", func() bool { return reached.Load() == 1 })
		defer func() {
			close(hold)
			if a := <-held; a.status != 200 {
				t.Errorf("the held request: %d", a.status)
			}
		}()
		const head = "GET /x HTTP/1.1\r\nHost: a.example\r\n"
		before := reached.Load()
		for i, fields := range []string{
			"X-Priority: critical\r\nX-Priority: sheddable\r\n",
			"x-priority: critical\r\nX-PRIORITY: sheddable\r\n",
			"X-Priority: \r\nX-Priority: critical\r\n",
		} {
			if status := rawStatus(t, base, head+fields+"\r\n"); status != http.StatusBadRequest {
				t.Errorf("%d %q: status %d, want 400", i, fields, status)
			}
		}
		if n := reached.Load() - before; n != 0 {
			t.Errorf("%d requests that repeated the tier header reached the upstream", n)
		}
		if status := rawStatus(t, base, head+"X-Priority: sheddable\r\n\r\n"); status != http.StatusServiceUnavailable {
			t.Errorf("sheddable over its ceiling: status %d, want 503", status)
		}
		if status := rawStatus(t, base, head+"X-Priority: critical\r\n\r\n"); status != http.StatusOK {
			t.Errorf("critical in its reserve: status %d, want 200", status)
		}
	})
}

package gateway

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
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

// TestOverloadIPv6ShareIsItsPrefix: on a route whose tenants are client
// addresses, an IPv6 client's share of the cap is its /64's: a client that
// holds four places of a cap of 4 from four addresses of its /64, and has
// two more waiting from two others, is one tenant above its share (2 of
// 4, with another tenant waiting), not six tenants each below theirs. The
// place it frees goes to the waiting client of another /64 first, and the
// next to its own waiters; the gateway counts two tenants, not seven.
func TestOverloadIPv6ShareIsItsPrefix(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		hold := make(chan struct{}) // each send lets one of the /64's held requests answer
		var mu sync.Mutex
		var seen []string
		h := func(w http.ResponseWriter, r *http.Request) {
			who := r.Header.Get("X-Who")
			mu.Lock()
			seen = append(seen, who)
			mu.Unlock()
			if strings.HasPrefix(who, "prefix") {
				select {
				case <-hold:
				case <-r.Context().Done():
				}
			}
			_, _ = io.WriteString(w, "ok")
		}
		g, base, c := overloadFront(t, front, "server:\n  trusted_proxies: [127.0.0.1/32]\n"+overloadPolicy(`
limit: 4
tiers: [{name: default}]
queue: {size: 16, per_tenant: 8, max_wait: 5s}`), h)
		seenNow := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(seen) }
		var wg sync.WaitGroup
		done := map[string]<-chan int{}
		send := func(who, addr string) {
			ch := make(chan int, 1)
			done[who] = ch
			wg.Go(func() {
				a, err := get(c, t.Context(), base+"/x", "X-Forwarded-For", addr, "X-Who", who)
				if err != nil {
					t.Error(err)
				}
				ch <- a.status
			})
		}
		defer func() {
			close(hold)
			wg.Wait()
		}()
		for i := 1; i <= 6; i++ {
			send(fmt.Sprintf("prefix%d", i), fmt.Sprintf("2001:db8:0:1:%x::%d", i*0x1111, i))
			if i <= 4 {
				pollUntil(t, "the /64 in flight", func() bool { return len(seenNow()) == i })
			} else {
				pollUntil(t, "the /64 queued", func() bool { return overloadState(g).Queued == i-4 })
			}
		}
		send("other", "2001:db8:0:2::1")
		pollUntil(t, "the other /64 queued", func() bool { return overloadState(g).Queued == 3 })
		if n, w := overloadTenants(g); n != 2 || w != 2 {
			t.Errorf("tenants counted %d, waiting %d; want 2 and 2 (one per /64)", n, w)
		}

		hold <- struct{}{}
		if got := <-done["other"]; got != http.StatusOK {
			t.Fatalf("the other /64: status %d, want 200", got)
		}
		pollUntil(t, "the /64 back at the cap", func() bool {
			s := overloadState(g)
			return s.Inflight == 4 && s.Queued == 1 && len(seenNow()) == 6
		})
		if s := seenNow(); len(s) != 6 || s[4] != "other" || !strings.HasPrefix(s[5], "prefix") {
			t.Errorf("the upstream saw %q; want the /64's four, the other /64's, then the /64's", s)
		}
	})
}

// TestOverloadHostTenantIsTheRoutedHost: on a route whose tenants are told
// by header:Host, a request's tenant is the host it is routed by, read as
// routes read it, on every front: B.example:80 is the tenant b.example,
// refused (tenant_full) while b.example waits with a backlog of one, and
// c.example waits beside it. Before 2026-12-06 net/http's server had taken
// Host out of the header fields, so on the net/http engine and the
// middleware every request was the one tenant "" and c.example was
// refused; the edge engine took the field as sent, so a client spelling
// its host another way (case, port, final dot) was a tenant of its own
// each time, past per_tenant.
func TestOverloadHostTenantIsTheRoutedHost(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, front string) {
		h := startHeldFront(t, front, overloadPolicy(`
limit: 1
tenant: header:Host
tiers: [{name: default}]
queue: {size: 4, per_tenant: 1, max_wait: 30s}`))
		send := func(who, host string) {
			h.wg.Go(func() {
				req, err := http.NewRequestWithContext(t.Context(), "GET", h.base+"/x", nil)
				if err != nil {
					t.Error(err)
					return
				}
				req.Host = host
				req.Header.Set("X-Who", who)
				resp, err := h.c.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				h.mu.Lock()
				h.answers[who] = resp.StatusCode
				h.mu.Unlock()
			})
		}
		send("held", "a.example")
		pollUntil(t, "1 in flight", func() bool { return h.u.now.Load() == 1 })
		send("first", "b.example")
		pollUntil(t, "1 queued", func() bool { return overloadState(h.g).Queued == 1 })
		send("same-host", "B.example:80")
		pollUntil(t, "the same host refused or waiting", func() bool {
			return h.obs.get(ShedTenantFull) == 1 || overloadState(h.g).Queued == 2
		})
		send("other-host", "c.example")
		pollUntil(t, "the other host waiting or refused", func() bool {
			return h.obs.get(ShedTenantFull)+overloadState(h.g).Queued == 3
		})
		answers := h.release()
		want := map[string]int{"held": http.StatusOK, "first": http.StatusOK, "same-host": http.StatusServiceUnavailable, "other-host": http.StatusOK}
		for who, code := range want {
			if answers[who] != code {
				t.Errorf("%s: status %d, want %d (all: %v)", who, answers[who], code, answers)
			}
		}
	})
}

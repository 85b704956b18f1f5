package main

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// TestServeBanHoldsAcrossIPv6Prefix: the penalty box keys client_ip by
// the client's counter key, an IPv6 client's /64, so a client that holds
// a /64 can neither spread its offences over its addresses nor leave a
// ban by changing address. Behind a trusted proxy, three refusals of a
// per-address limit, each from another address of one /64, ban it (after:
// 3); a fifth address of that /64 is then answered as banned (429, no
// RateLimit fields, Retry-After of the hour's ban), an address of another
// /64 is served, and the admin API lists one ban, of the /64.
func TestServeBanHoldsAcrossIPv6Prefix(t *testing.T) {
	forEngines(t, testServeBanHoldsAcrossIPv6Prefix)
}

func testServeBanHoldsAcrossIPv6Prefix(t *testing.T, engine string) {
	up := newUpstream(t)
	cfg := writeConfig(t, fmt.Sprintf(`server:
  trusted_proxies: [127.0.0.1]
  admin:
    tokens: [{name: ops, sha256: %q}]
  bans:
    - {name: flood, key: client_ip, after: 3, within: 1m, ban: 1h}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
limits:
  - {name: per-ip, rate: 1, per: 1m, burst: 1}
`, sha256Hex("ops-token"), up))
	gw, admin, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	from := func(addr string) map[string]string { return map[string]string{"X-Forwarded-For": addr} }
	if st, _, body := fetchURL(t, gw+"/", from("2001:db8:0:1::1")); st != 200 {
		t.Fatalf("the first address: %d %s", st, body)
	}
	for i, addr := range []string{"2001:db8:0:1:aaaa::2", "2001:db8:0:1:bbbb:cccc::3", "2001:db8:0:1:ffff:ffff:ffff:4"} {
		if st, h, _ := fetchURL(t, gw+"/", from(addr)); st != 429 || h.Get("RateLimit") == "" {
			t.Fatalf("refusal %d from %s: %d %v, want the limit's 429", i, addr, st, h)
		}
	}
	another := from("2001:db8:0:1:1234:5678:9abc:def0")
	waitUntil(t, "the /64's ban", 5*time.Second, func() bool {
		_, h, _ := fetchURL(t, gw+"/", another)
		return h.Get("RateLimit") == ""
	})
	st, h, _ := fetchURL(t, gw+"/", another)
	if ra, err := strconv.Atoi(h.Get("Retry-After")); st != 429 || err != nil || ra < 3500 || ra > 3600 || h.Get("RateLimit") != "" {
		t.Errorf("another address of the banned /64: %d Retry-After %q RateLimit %q; want 429, the hour's ban, no RateLimit",
			st, h.Get("Retry-After"), h.Get("RateLimit"))
	}
	if st, _, body := fetchURL(t, gw+"/", from("2001:db8:0:2::1")); st != 200 {
		t.Errorf("an address of another /64: %d %s, want 200", st, body)
	}
	var list struct {
		Bans []struct{ Ban, Key, Kind string }
	}
	if st := call(t, "GET", admin+"/api/v1/bans", "ops-token", nil, &list); st != 200 || len(list.Bans) != 1 ||
		list.Bans[0].Key != "2001:db8:0:1::/64" || list.Bans[0].Kind != "client_ip" {
		t.Errorf("bans %d %+v, want one of 2001:db8:0:1::/64", st, list)
	}
}

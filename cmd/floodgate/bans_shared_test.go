package main

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redistest"
)

// TestServeSharedLimitBansNoOne: through floodgate serve, on both engines
// and both stores, a client is banned for spending its own limits, never
// a limit it shares with others. An attacker spends a global limit (from
// a few addresses) and a plan's shared limit (with two keys of the plan);
// an innocent address and an innocent key refused by them again and again
// are not banned, while an address refused by its per-address limit and a
// key refused by its plan's per-key throttle are, and the key's address
// is not.
func TestServeSharedLimitBansNoOne(t *testing.T) {
	forEnginesAndStores(t, testServeSharedLimitBansNoOne)
}

func testServeSharedLimitBansNoOne(t *testing.T, engine, store string) {
	storeLine := ""
	if store == "redis" {
		rs := redistest.Start(t)
		storeLine = fmt.Sprintf("  store: redis://%s/0\n  store_timeout: 2s\n", rs.Addr)
	}
	up := newUpstream(t)
	keys := []string{"acme", "mallory", "eve", "beta"}
	var keyLines []string
	for _, k := range keys {
		keyLines = append(keyLines, fmt.Sprintf("  - {name: %s, plan: gold, sha256: %q}", k, sha256Hex("key-"+k)))
	}
	cfg := writeConfig(t, fmt.Sprintf(`server:
%s  trusted_proxies: [127.0.0.1]
  admin:
    tokens: [{name: ops, sha256: %q}]
  bans:
    - {name: flood, key: client_ip, after: 3, within: 1h, ban: 1h}
    - {name: keys, key: api_key, after: 3, within: 1h, ban: 1h}
plans: [{name: gold, rate: 1, per: 1h, burst: 3, routes: [paid]}]
keys:
%s
routes:
  - {name: open, match: {paths: ["/open/**"]}, upstream: %s}
  - {name: paid, match: {paths: ["/paid/**"]}, upstream: %s, api_key_required: true}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 3, match: {routes: [open]}}
  - {name: everyone, key: global, scope: global, rate: 1, per: 1h, burst: 12, match: {routes: [open]}}
  - {name: gold-shared, key: plan, rate: 1, per: 1h, burst: 8, match: {routes: [paid]}}
`, storeLine, sha256Hex("ops-token"), strings.Join(keyLines, "\n"), up, up))
	gw, admin, _, _ := startServe(t, "--engine", engine, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")

	open := func(ip string) (int, http.Header) {
		st, h, _ := fetchURL(t, gw+"/open/", map[string]string{"X-Forwarded-For": ip})
		return st, h
	}
	paid := func(ip, key string) (int, http.Header) {
		st, h, _ := fetchURL(t, gw+"/paid/", map[string]string{"X-Forwarded-For": ip, "X-Api-Key": "key-" + key})
		return st, h
	}
	// notBanned reports whether a 429 was answered by the limit named
	// (its RateLimit field), not by the penalty box (which answers
	// without one); refusedBy stops the test when it was not.
	notBanned := func(what string, st int, h http.Header, limit string) bool {
		t.Helper()
		if st != 429 || !strings.Contains(h.Get("RateLimit"), `"`+limit+`"`) {
			t.Errorf("%s: %d RateLimit %q, want 429 from %s", what, st, h.Get("RateLimit"), limit)
			return false
		}
		return true
	}
	refusedBy := func(what string, st int, h http.Header, limit string) {
		t.Helper()
		if !notBanned(what, st, h, limit) {
			t.FailNow()
		}
	}
	ok := func(what string, st int) {
		t.Helper()
		if st != 200 {
			t.Fatalf("%s: %d, want 200", what, st)
		}
	}

	// A client that spends its own per-address limit offends.
	for i := range 3 {
		st, _ := open("192.0.2.1")
		ok(fmt.Sprintf("guilty address %d", i), st)
	}
	for i := range 3 {
		st, h := open("192.0.2.1")
		refusedBy(fmt.Sprintf("guilty address refusal %d", i), st, h, "per-ip")
	}
	// A key that spends its own throttle offends, its address does not.
	for i := range 3 {
		st, _ := paid("192.0.2.50", "acme")
		ok(fmt.Sprintf("guilty key %d", i), st)
	}
	for i := range 3 {
		st, h := paid("192.0.2.50", "acme")
		refusedBy(fmt.Sprintf("guilty key refusal %d", i), st, h, "gold.rate")
	}

	// The attacker spends the global limit, three requests an address
	// (under its per-address limit), until it refuses.
	spent := false
	for a := 1; a <= 10 && !spent; a++ {
		for range 3 {
			st, h := open(fmt.Sprintf("203.0.113.%d", a))
			if st == 429 {
				refusedBy("attacker", st, h, "everyone")
				spent = true
				break
			}
			ok("attacker", st)
		}
	}
	if !spent {
		t.Fatal("the global limit was not spent")
	}
	// ... and the plan's shared limit, with two keys, each under its
	// throttle.
	for _, k := range []string{"mallory", "mallory", "mallory", "eve", "eve"} {
		st, _ := paid("203.0.113.99", k)
		ok("attacker key "+k, st)
	}
	st, h := paid("203.0.113.98", "eve")
	refusedBy("attacker key eve", st, h, "gold-shared")

	// The innocent are refused by the shared limits, again and again.
	addressOK, keyOK := true, true
	for i := range 5 {
		if addressOK {
			st, h := open("198.51.100.7")
			addressOK = notBanned(fmt.Sprintf("innocent address %d", i), st, h, "everyone")
		}
		if keyOK {
			st, h := paid(fmt.Sprintf("198.51.100.%d", 60+i), "beta")
			keyOK = notBanned(fmt.Sprintf("innocent key %d", i), st, h, "gold-shared")
		}
	}

	// The guilty are banned: the box answers, without RateLimit fields.
	waitUntil(t, "the guilty address's ban", 10*time.Second, func() bool {
		st, h := open("192.0.2.1")
		return st == 429 && h.Get("RateLimit") == ""
	})
	waitUntil(t, "the guilty key's ban", 10*time.Second, func() bool {
		st, h := paid("192.0.2.51", "acme")
		return st == 429 && h.Get("RateLimit") == ""
	})
	// The innocent are not: a limit still answers them.
	st, h = open("198.51.100.7")
	notBanned("innocent address after the floods", st, h, "everyone")
	st, h = paid("198.51.100.70", "beta")
	notBanned("innocent key after the floods", st, h, "gold-shared")

	var list struct {
		Bans []struct {
			Ban, Key, Kind string
		}
		Total int
	}
	if st := call(t, "GET", admin+"/api/v1/bans", "ops-token", nil, &list); st != 200 {
		t.Fatalf("bans: %d", st)
	}
	var got []string
	for _, b := range list.Bans {
		got = append(got, b.Ban+" "+b.Kind+" "+b.Key)
	}
	sort.Strings(got)
	want := []string{"flood client_ip 192.0.2.1", "keys api_key acme"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") || list.Total != len(want) {
		t.Errorf("bans %q (total %d), want %q", got, list.Total, want)
	}
}

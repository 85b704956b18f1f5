package gateway

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/penalty"
)

// TestSharedRefusalOffendsNoStatusRule: a penalty-box rule that counts
// the 429s a client gets (count_on: [429], three within a minute) counts
// a refusal by a limit only when that limit counts per what the rule bans,
// as a rule without count_on does: an attacker who spends a limit every
// client shares (global) gets the clients it refuses 429s, and none of
// them banned, while a client refused by its own per-address limit is.
func TestSharedRefusalOffendsNoStatusRule(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testSharedRefusalOffendsNoStatusRule)
}

func testSharedRefusalOffendsNoStatusRule(t *testing.T, fr string) {
	p := compilePolicy(t, "shared.yaml", `
server:
  trusted_proxies: [127.0.0.1]
  bans:
    - {name: noisy, key: client_ip, after: 3, within: 1m, ban: 1h, count_on: [429]}
routes:
  - {name: open, match: {paths: ["/open/**"]}, upstream: http://127.0.0.1:9}
  - {name: own, match: {paths: ["/own/**"]}, upstream: http://127.0.0.1:9}
limits:
  - {name: everyone, key: global, match: {routes: [open]}, rate: 1, per: 1h, burst: 2}
  - {name: per-ip, match: {routes: [own]}, rate: 1, per: 1h, burst: 1}
`)
	box, err := penalty.New(p.File().Server.Bans, penalty.Options{Backend: penalty.NewMemory(0, nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(box.Close)
	_, base, c := startFront(t, fr, Options{Matcher: mustPolicyMatcher(t, p), Engine: memEngine(t), Gatekeeper: boxKeeper{box}},
		func(http.ResponseWriter, *http.Request) {})
	attacker := map[string]string{"X-Forwarded-For": "192.0.2.1"}
	victim := map[string]string{"X-Forwarded-For": "192.0.2.2"}
	if got := statuses(doN(t, c, 2, base+"/open/x", attacker)); got[0] != 200 || got[1] != 200 {
		t.Fatalf("the attacker spending the global limit: %v, want [200 200]", got)
	}
	if got := statuses(doN(t, c, 4, base+"/open/x", victim)); got[0] != 429 || got[3] != 429 {
		t.Fatalf("the victim against the spent global limit: %v, want 429s", got)
	}
	// An offender refused by its own per-address limit three times is
	// banned; its ban also tells that the victim's outcomes were counted.
	offender := map[string]string{"X-Forwarded-For": "192.0.2.3"}
	doN(t, c, 4, base+"/own/x", offender)
	pollUntilFor(t, "the offender's ban", 5*time.Second, func() bool {
		_, _, banned := box.Banned("192.0.2.3", "", "")
		return banned
	})
	time.Sleep(100 * time.Millisecond) // the gatekeeper is told of a request once it is answered
	if rule, until, banned := box.Banned("192.0.2.2", "", ""); banned {
		t.Errorf("a client refused only by the global limit another client spent is banned by %s until %v", rule, until)
	}
	if got := do(t, c, "GET", base+"/own/x", victim).status; got != 200 {
		t.Errorf("the victim on a route of its own limit: %d, want 200", got)
	}
}

// TestOverloadShedOffendsNoStatusRule: a request shed by overload control
// is refused for capacity every client shares, as by a limit they share,
// so a penalty-box rule counting 503s (count_on: [503], three within a
// minute) does not count the gateway's 503 of a shed: an attacker holding
// the route's only place gets a victim's four requests shed, and the
// victim is not banned. The upstream's own 503s still count: a client
// the upstream answers 503 three times is.
func TestOverloadShedOffendsNoStatusRule(t *testing.T) {
	forFronts(t, allFronts, func(t *testing.T, fr string) {
		p := compilePolicy(t, "shedban.yaml", `
server:
  trusted_proxies: [127.0.0.1]
  bans:
    - {name: unavailable, key: client_ip, after: 3, within: 1m, ban: 1h, count_on: [503]}
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:9
    overload: {limit: 1, tiers: [{name: default}]}
limits:
  - {name: per-ip, rate: 1000, burst: 1000}
`)
		box, err := penalty.New(p.File().Server.Bans, penalty.Options{Backend: penalty.NewMemory(0, nil)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(box.Close)
		u := newHolding()
		var once sync.Once
		release := func() { once.Do(func() { close(u.release) }) }
		t.Cleanup(release)
		_, base, c := startFront(t, fr, Options{Matcher: mustPolicyMatcher(t, p), Engine: memEngine(t), Gatekeeper: boxKeeper{box}},
			func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/down" {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				u.ServeHTTP(w, r)
			})
		attacker := []string{"X-Forwarded-For", "192.0.2.1"}
		victim := []string{"X-Forwarded-For", "192.0.2.2"}
		held := getLater(t, c, base+"/held", attacker...)
		pollUntil(t, "the attacker's request in flight", func() bool { return u.now.Load() == 1 })
		for i := range 4 {
			a, err := get(c, t.Context(), base+"/x", victim...)
			if err != nil {
				t.Fatal(err)
			}
			if a.status != http.StatusServiceUnavailable || a.body != string(bodyUnavailable) {
				t.Errorf("the victim's request %d while the attacker held the cap: %d %q, want 503 (shed), no ban", i+1, a.status, a.body)
			}
		}
		release()
		if a := <-held; a.status != http.StatusOK {
			t.Fatalf("the attacker's held request: %d, want 200", a.status)
		}
		// A client the upstream itself refuses three times is banned;
		// its ban also tells that the victim's outcomes were counted.
		offender := map[string]string{"X-Forwarded-For": "192.0.2.3"}
		if got := statuses(doN(t, c, 3, base+"/down", offender)); got[2] != http.StatusServiceUnavailable {
			t.Fatalf("the upstream's refusals: %v, want 503s", got)
		}
		pollUntilFor(t, "the offender's ban", 5*time.Second, func() bool {
			_, _, banned := box.Banned("192.0.2.3", "", "")
			return banned
		})
		time.Sleep(100 * time.Millisecond) // the gatekeeper is told of a request once it is answered
		if rule, until, banned := box.Banned("192.0.2.2", "", ""); banned {
			t.Errorf("a client whose requests overload control shed while another held the cap is banned by %s until %v", rule, until)
		}
		if got := do(t, c, "GET", base+"/y", map[string]string{"X-Forwarded-For": "192.0.2.2"}).status; got != http.StatusOK {
			t.Errorf("the victim after the flood: %d, want 200", got)
		}
	})
}

package penalty

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/policy"
)

// TestUnknownKeysFillNoBans: under a rule keyed by API key, a client that
// sends made-up keys (each one "?" and its hash to the gateway) earns no
// ban for them, so that it cannot fill the box with bans of keys it never
// sends again and keep every real offender, of any rule, from being
// banned. A real key and an address are still banned.
func TestUnknownKeysFillNoBans(t *testing.T) {
	const bound = 10
	keys := config.Ban{Name: "keys", Key: config.BanKeyAPIKey, After: 1, Within: time.Minute, Ban: time.Minute,
		MaxBan: time.Minute, Growth: 1, CountOn: []int{403}}
	perKey := config.Ban{Name: "per-key", Key: config.BanKeyAPIKey, After: 1, Within: time.Minute, Ban: time.Minute,
		MaxBan: time.Minute, Growth: 1}
	ip := flood
	ip.After = 1
	box, err := New([]config.Ban{keys, perKey, ip}, Options{Backend: NewMemory(bound, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	ctx := context.Background()
	banned := 0
	for i := range 10 * bound {
		made := fmt.Sprintf("?%032x", i)
		box.Outcome(ctx, "ip:192.0.2.1", made, "", false, 0, 403)                    // a route that requires a key
		box.Outcome(ctx, "ip:192.0.2.1", made, "", true, policy.IdentityAPIKey, 429) // a limit per API key
		if _, _, ok := box.Banned("ip:192.0.2.2", made, ""); ok {
			banned++
		}
	}
	bans, err := box.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if banned > 0 || len(bans) > 0 {
		t.Errorf("%d made-up keys: %d of them banned, %d bans in a box of %d, want none", 10*bound, banned, len(bans), bound)
	}
	box.Outcome(ctx, "ip:192.0.2.3", "", "", true, policy.IdentityClientIP, 429)
	if _, _, banned := box.Banned("ip:192.0.2.3", "", ""); !banned {
		t.Error("after a flood of made-up keys, an address that offends is not banned")
	}
	box.Outcome(ctx, "ip:192.0.2.4", "acme", "", false, 0, 403)
	if rule, _, banned := box.Banned("ip:192.0.2.5", "acme", ""); !banned || rule != "keys" {
		t.Errorf("after a flood of made-up keys, a real key that offends is not banned (%q, %v)", rule, banned)
	}
}

package config

import (
	"strings"
	"testing"
	"time"
)

// TestOverloadDefaults loads the documented overload block and checks the
// defaults validation writes in.
func TestOverloadDefaults(t *testing.T) {
	f, err := Parse("o.yaml", []byte(`
plans:
  - name: gold
    rate: 100
    tier: critical
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:9000
    overload:
      adaptive: {min: 4, max: 512, initial: 16, tolerance: 1.5, window: 1s, min_samples: 20}
      queue: {size: 256, max_wait: 500ms}
      tenant: header:X-Tenant
      tier_header: x-priority
  - name: fixed
    match: {paths: ["/fixed/**"]}
    upstream: http://127.0.0.1:9000
    overload:
      limit: 32
      tiers:
        - {name: critical, reserve: 0.2}
        - {name: sheddable}
`))
	if err != nil {
		t.Fatal(err)
	}
	o := f.Routes[0].Overload
	if o == nil || o.Adaptive == nil || o.Adaptive.Tolerance != 1.5 || o.Adaptive.Window != time.Second || o.Adaptive.MinSamples != 20 {
		t.Fatalf("adaptive = %+v", o.Adaptive)
	}
	if o.Queue.PerTenant != 32 || o.Queue.MaxWait != 500*time.Millisecond {
		t.Errorf("queue = %+v, want per_tenant 32 (size/8)", o.Queue)
	}
	if o.Tier != TierDefault || len(o.Tiers) != 3 || o.Tiers[0] != (Tier{Name: TierCritical, Reserve: 0.1}) {
		t.Errorf("tiers = %+v, tier %q", o.Tiers, o.Tier)
	}
	if o.TierHeader != "X-Priority" || o.Tenant != "header:X-Tenant" {
		t.Errorf("tier_header %q tenant %q", o.TierHeader, o.Tenant)
	}
	fx := f.Routes[1].Overload
	if fx.Limit != 32 || fx.Tenant != TenantClientIP || fx.Tier != "sheddable" {
		t.Errorf("fixed = %+v: want tenant client_ip and the lowest tier when none is named default", fx)
	}
	if s := o.String(); !strings.Contains(s, "adaptive limit 4..512 from 16") || !strings.Contains(s, "queue 256 (32 per tenant, max wait 500ms)") {
		t.Errorf("String() = %q", s)
	}
}

package rls

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetadataKeptWithDetailedMetric: a limit's configured metadata is in
// the dynamic metadata of a request that passes it when the limit has
// detailed_metric or its entry value_to_metric too, in both modes; the
// statistics' names do not change what the answer carries (a documented
// difference: envoyproxy/ratelimit leaves it out then).
func TestMetadataKeptWithDetailedMetric(t *testing.T) {
	const src = `domain: d
descriptors:
  - key: a
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 5}
    metadata: {service: alpha}
  - key: b
    value_to_metric: true
    rate_limit: {unit: hour, requests_per_unit: 5}
    metadata: {service: beta}
`
	for _, compat := range []bool{false, true} {
		cfg, err := ParseWith("test.yaml", []byte(src), LoadOptions{Compat: compat})
		if err != nil {
			t.Fatal(err)
		}
		st, err := NewStats(prometheus.NewRegistry(), StatsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := startService(t, cfg, newClock(), Options{DynamicMetadata: true, Stats: st})
		for _, d := range []struct{ key, want string }{{"a", "alpha"}, {"b", "beta"}} {
			r := ask(t, c, "d", desc(d.key, "v"))
			got := r.GetDynamicMetadata().GetFields()["metadata"].GetStructValue().GetFields()["service"].GetStringValue()
			if r.OverallCode != ok || got != d.want {
				t.Errorf("compat %v, %s=v: %v; want OK with metadata service %q", compat, d.key, r, d.want)
			}
		}
	}
}

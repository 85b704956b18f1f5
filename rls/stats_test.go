package rls

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/promtest"
)

// TestStatsFoldNamesFromRequests: names that hold values from requests
// are bounded; past the bound they are counted as DOMAIN._other, while
// names made of the configuration keep their own series.
func TestStatsFoldNamesFromRequests(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	st, err := NewStats(reg, StatsOptions{MaxKeys: 3})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := startService(t, mustParse(t, `
domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 100}
`), newClock(), Options{Stats: st})
	for i := range 10 {
		ask(t, c, "d", desc("user", fmt.Sprint("u", i)))
		ask(t, c, "d", desc("plain", fmt.Sprint("p", i)))
		ask(t, c, fmt.Sprint("unknown", i), desc("plain", "x"))
	}
	total := func(labels promtest.Labels) float64 {
		return promtest.Value(t, reg, "ratelimit_service_rate_limit_total_hits", labels)
	}
	for i := range 3 {
		if n := total(promtest.Labels{"domain": "d", "key1": fmt.Sprint("user_u", i)}); n != 1 {
			t.Errorf("user_u%d: %v", i, n)
		}
	}
	if n := total(promtest.Labels{"domain": "d", "key1": FoldedKey}); n != 7 {
		t.Errorf("folded: %v, want 7", n)
	}
	if n := total(promtest.Labels{"domain": "d", "key1": "plain"}); n != 10 {
		t.Errorf("plain: %v, want 10", n)
	}
	if n := len(promtest.Find(t, reg, "ratelimit_service_rate_limit_total_hits", nil)); n != 5 {
		t.Errorf("%d series, want 5 (3 values, _other, plain)", n)
	}
	// Unknown domains: three names, then _other.
	if n := promtest.Value(t, reg, "ratelimit_service_rate_limit__other_domain_not_found", nil); n != 7 {
		t.Errorf("unknown domains folded: %v, want 7", n)
	}
	if n := promtest.Value(t, reg, "ratelimit_service_rate_limit_unknown0_domain_not_found", nil); n != 1 {
		t.Errorf("unknown0: %v", n)
	}
}

// TestStatsCountAsEnvoyproxyRatelimit: a request that crosses the limit
// splits its hits between near_limit and over_limit; a request past it
// counts all of them over the limit.
func TestStatsCountAsEnvoyproxyRatelimit(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	st, err := NewStats(reg, StatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	labels := promtest.Labels{"domain": "d", "key1": "k"}
	get := func(stat string) float64 {
		return promtest.Value(t, reg, "ratelimit_service_rate_limit_"+stat, labels)
	}
	// A limit of 10 (near from 8): 7 hits, then 5 hits (7 → 12), then 2.
	st.count("d.k", true, 7, 0, 7, 10, false, false)
	st.count("d.k", true, 5, 7, 12, 10, true, true)
	st.count("d.k", true, 2, 12, 14, 10, true, false)
	for stat, want := range map[string]float64{"total_hits": 14, "within_limit": 7, "near_limit": 2, "over_limit": 4, "shadow_mode": 2} {
		if got := get(stat); got != want {
			t.Errorf("%s %v, want %v", stat, got, want)
		}
	}
	if got := statLabels("d.ip_10.1.2.3.extra.more"); strings.Join(got, "|") != "d|ip_10_1_2_3|extra" {
		t.Errorf("labels %q", got)
	}
	if got := escapeMetricName("a-b--c.d/é"); got != "a_b_c_d__" {
		t.Errorf("escaped %q", got)
	}
}

// TestServiceWideModes: the global shadow mode turns OVER_LIMIT answers
// into OK (the statuses keep their codes) and counts them; the global
// quota mode puts every descriptor in quota mode; the peer headers and the
// dynamic metadata are added in both modes.
func TestServiceWideModes(t *testing.T) {
	everywhere(t, Minute, func(r *run) error {
		c := r.start(`
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {team: {name: alpha}}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata: {team: {tier: 2}, owner: bee}
`, Options{ShadowMode: true, DynamicMetadata: true, PeerHeaders: &DefaultPeerHeaders, NoFields: true})
		r.ask(c, req("d", desc("a", "1")))
		resp := r.ask(c, req("d", desc("a", "1"), desc("b", "1")))
		if resp.OverallCode != ok || resp.Statuses[0].Code != over || resp.Statuses[1].Code != ok {
			return fmt.Errorf("global shadow mode: %v", resp)
		}
		if n := r.stat("ratelimit_service_global_shadow_mode", nil); n != 1 {
			return fmt.Errorf("global_shadow_mode %v", n)
		}
		h := map[string]string{}
		for _, hv := range resp.ResponseHeadersToAdd {
			h[hv.Key] = hv.Value
		}
		if h["RateLimit-Limit"] != "1" || h["RateLimit-Remaining"] != "0" || h["RateLimit-Reset"] == "" || len(h) != 3 {
			return fmt.Errorf("headers %v: want those of a, the one over its limit", h)
		}
		// Only b passed: its metadata alone.
		md := resp.DynamicMetadata.AsMap()
		want := map[string]any{"team": map[string]any{"tier": 2.0}, "owner": "bee"}
		if fmt.Sprint(md["metadata"]) != fmt.Sprint(want) || md["domain"] != "d" || len(md["descriptors"].([]any)) != 2 {
			return fmt.Errorf("dynamic metadata %v", md)
		}
		lk := desc("b", "2")
		lk.HitsAddend = wrapperspb.UInt64(0)
		resp = r.ask(c, req("d", desc("a", "2"), lk))
		got, _ := structpb.NewValue(resp.DynamicMetadata.AsMap()["metadata"])
		if got.GetStructValue().GetFields()["team"].GetStructValue().GetFields()["name"].GetStringValue() != "alpha" ||
			got.GetStructValue().GetFields()["team"].GetStructValue().GetFields()["tier"].GetNumberValue() != 2 {
			return fmt.Errorf("merged metadata %v", got)
		}

		q := r.start(`
domain: q
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 2}
`, Options{QuotaMode: true})
		for i, want := range []string{"OK OK OK", "OK OVER_LIMIT OK", "OVER_LIMIT OVER_LIMIT OVER_LIMIT"} {
			resp := r.ask(q, req("q", desc("a", "x"), desc("b", "x")))
			if got := fmt.Sprint(resp.OverallCode, " ", resp.Statuses[0].Code, " ", resp.Statuses[1].Code); got != want {
				return fmt.Errorf("global quota mode, request %d: %s, want %s", i+1, got, want)
			}
		}
		return nil
	})
}

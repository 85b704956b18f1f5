package gateway

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/metrics"
)

// TestOverloadTenantSecretNeverShown: a route whose overload queue serves
// tenants by a field that carries a credential (header:Authorization) counts
// its sheds by tenant without the credential: the metrics name such a
// tenant by its hash, and an explanation shows the hash too (they held the
// bearer token as it was sent).
func TestOverloadTenantSecretNeverShown(t *testing.T) {
	forFronts(t, proxyFronts, func(t *testing.T, front string) {
		reg := prometheus.NewRegistry()
		m, err := metrics.New(reg, metrics.Options{})
		if err != nil {
			t.Fatal(err)
		}
		u := newHolding()
		p := compilePolicy(t, "overload.yaml", overloadPolicy(`
limit: 1
tier: critical
tenant: header:Authorization`))
		pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		g, base, c := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t), Observer: m}, u.ServeHTTP)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = get(c, t.Context(), base+"/held", "Authorization", "Bearer sk-live-held-0001")
		}()
		pollUntil(t, "1 in flight", func() bool { return u.now.Load() == 1 })
		const secret = "Bearer sk-live-shed-0002"
		a, err := get(c, t.Context(), base+"/shed", "Authorization", secret)
		if err != nil {
			t.Fatal(err)
		}
		checkShed(t, a, "1")
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, mf := range mfs {
			if mf.GetName() != "floodgate_overload_shed_tenants_total" {
				continue
			}
			for _, mt := range mf.GetMetric() {
				for _, lp := range mt.GetLabel() {
					if lp.GetName() != "tenant" {
						continue
					}
					found = true
					if strings.Contains(lp.GetValue(), "sk-live") {
						t.Errorf("a shed tenant labelled %q: the credential as it was sent", lp.GetValue())
					} else if !strings.HasPrefix(lp.GetValue(), "sha256:") {
						t.Errorf("a shed tenant labelled %q, want its hash", lp.GetValue())
					}
				}
			}
		}
		if !found {
			t.Error("no shed counted by tenant")
		}
		close(u.release)
		<-done
		_ = g
	})
}

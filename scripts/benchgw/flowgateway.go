package main

import (
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
)

// policyGateway builds the gateway of the policy file at path as
// floodgate serve builds it for the embedded store: its matcher, the
// memory store, the RateLimit fields the file asks for and the metrics
// (the dashboard's counts and the access log left out). close stops the
// store.
func policyGateway(path string) (g *gateway.Gateway, close func(), err error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("flowloop: %w", err)
	}
	f, err := config.Parse(path, src)
	if err != nil {
		return nil, nil, fmt.Errorf("flowloop: %w", err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("flowloop: %w", err)
	}
	pm, err := gateway.NewPolicyMatcher(gateway.Fixed(p), gateway.PolicyMatcherOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("flowloop: %w", err)
	}
	m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("flowloop: %w", err)
	}
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("flowloop: %w", err)
	}
	g, err = gateway.New(gateway.Options{Matcher: pm, Engine: limiter.New(st, limiter.Options{}),
		Fields: gateway.FieldOptions(f.Server.Headers), Observer: m})
	if err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("flowloop: %w", err)
	}
	return g, func() { st.Close() }, nil
}

//go:build !prometheus

package main

import (
	"net/http"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/limiter"
)

// serveMetrics is empty in a build without Prometheus: go.mod does not yet
// list client_golang's own requirements, so /metrics needs the build tag
// prometheus (see gateway/metrics.go).
type serveMetrics struct{}

// metricsBuiltIn reports whether this build serves /metrics.
const metricsBuiltIn = false

// newServeMetrics returns no handler: /metrics is not served.
func newServeMetrics() (*serveMetrics, http.Handler, error) { return &serveMetrics{}, nil, nil }

func (*serveMetrics) gatewayObserver() gateway.Observer { return nil }
func (*serveMetrics) limiterObserver() limiter.Observer { return nil }

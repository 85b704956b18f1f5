package app

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/gateway"
)

// The routes' upstream pools (gateway.Gateway.UseRoutes) follow the
// policy file; their targets' health is in /metrics and, when a pool has
// no healthy target left, in /readyz.

// useRoutes makes the pools of the running policy file; with --demo every
// route goes to the demo upstream and there are none.
func (s *server) useRoutes(g *gateway.Gateway) {
	if s.demo != nil {
		return
	}
	// One at a time, each with the policy of its own moment: a reload
	// that comes while listen builds the gateway (the watch runs from
	// before) leaves the pools of the latest policy, whichever call ends
	// last.
	s.routesMu.Lock()
	defer s.routesMu.Unlock()
	if err := g.UseRoutes(s.reloader.Policy().File()); err != nil {
		s.log.Error("upstream pools", "err", err)
	}
}

// upstreamTLSError wraps a problem of server.upstream.tls.
func upstreamTLSError(err error) error {
	return fmt.Errorf("serve: server.upstream.tls: %w", err)
}

// targetHealth is floodgate_upstream_target_healthy{route,target}, read
// from the pools when /metrics is scraped.
type targetHealth struct {
	s    *server
	desc *prometheus.Desc
}

func newTargetHealth(s *server) *targetHealth {
	return &targetHealth{s: s, desc: prometheus.NewDesc("floodgate_upstream_target_healthy",
		"1 when a target of a route's upstream pool takes requests, 0 while passive or active health checks keep it out.",
		[]string{"route", "target"}, nil)}
}

func (c *targetHealth) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *targetHealth) Collect(ch chan<- prometheus.Metric) {
	g := c.s.gateway.Load()
	if g == nil {
		return
	}
	for _, t := range g.Targets() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, b2f(t.Healthy), t.Route, t.Target)
	}
}

// poolsDown lists, for /readyz, the pools none of whose targets is
// healthy.
func (s *server) poolsDown() []string {
	g := s.gateway.Load()
	if g == nil {
		return nil
	}
	up := map[string]bool{}
	var order []string
	down := map[string][]string{}
	for _, t := range g.Targets() {
		if _, seen := up[t.Route]; !seen {
			order = append(order, t.Route)
			up[t.Route] = false
		}
		if t.Healthy {
			up[t.Route] = true
		} else {
			down[t.Route] = append(down[t.Route], t.Target)
		}
	}
	var out []string
	for _, r := range order {
		if !up[r] {
			out = append(out, fmt.Sprintf("route %s: no healthy upstream target (%s)", r, strings.Join(down[r], ", ")))
		}
	}
	return out
}

package rls

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/floodgate/floodgate/internal/promtest"
)

// lines collects what a StatsdSink is given, as statsd lines.
type lines struct {
	mu sync.Mutex
	l  []string
}

func (s *lines) add(l string) { s.mu.Lock(); s.l = append(s.l, l); s.mu.Unlock() }
func (s *lines) Counter(name string, d uint64) {
	s.add(fmt.Sprintf("%s:%d|c", name, d))
}
func (s *lines) Gauge(name string, v uint64)   { s.add(fmt.Sprintf("%s:%d|g", name, v)) }
func (s *lines) Timer(name string, ms float64) { s.add(fmt.Sprintf("%s:%v|ms", name, ms)) }
func (s *lines) take(prefix string) (out []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.l {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	s.l = nil
	return out
}

// TestFlushStatsdSendsWhatCountedSinceTheLastFlush: a flush sends each
// counter's growth since the previous one, nothing for a counter that did
// not grow, and names from requests past the bound as DOMAIN._other.
func TestFlushStatsdSendsWhatCountedSinceTheLastFlush(t *testing.T) {
	t.Parallel()
	sink := &lines{}
	st, c := detailedUsers(t, prometheus.NewRegistry(), StatsOptions{MaxKeys: 1, Statsd: sink})
	ask(t, c, "d", desc("user", "a"))
	ask(t, c, "d", desc("user", "a"))
	ask(t, c, "d", desc("user", "b"))
	ask(t, c, "d", desc("user", "c"))
	st.FlushStatsd()
	got := strings.Join(sink.take("ratelimit.service."), "\n")
	for _, want := range []string{
		"ratelimit.service.rate_limit.d.user_a.total_hits:2|c",
		"ratelimit.service.rate_limit.d.user_a.within_limit:2|c",
		"ratelimit.service.rate_limit.d._other.total_hits:2|c",
	} {
		if !strings.Contains(got+"\n", want+"\n") {
			t.Errorf("first flush lacks %s:\n%s", want, got)
		}
	}
	if strings.Contains(got, "user_b") || strings.Contains(got, "user_c") {
		t.Errorf("names past the bound sent:\n%s", got)
	}
	ask(t, c, "d", desc("user", "a"))
	st.FlushStatsd()
	got = strings.Join(sink.take("ratelimit.service."), "\n")
	if want := "ratelimit.service.rate_limit.d.user_a.total_hits:1|c\nratelimit.service.rate_limit.d.user_a.within_limit:1|c"; got != want &&
		got != "ratelimit.service.rate_limit.d.user_a.within_limit:1|c\nratelimit.service.rate_limit.d.user_a.total_hits:1|c" {
		t.Errorf("second flush:\n%s\nwant:\n%s", got, want)
	}
	st.FlushStatsd()
	if got := sink.take("ratelimit.service."); len(got) != 0 {
		t.Errorf("a flush after no request sent %q", got)
	}
}

// TestUnaryInterceptorCountsEachMethodApart: every call is counted under
// its own method, in Prometheus and in statsd, however many calls of
// another method came before it.
func TestUnaryInterceptorCountsEachMethodApart(t *testing.T) {
	t.Parallel()
	sink := &lines{}
	reg := prometheus.NewRegistry()
	st, err := NewStats(reg, StatsOptions{Statsd: sink, ConstLabels: prometheus.Labels{"env": "t"}})
	if err != nil {
		t.Fatal(err)
	}
	ic := st.UnaryInterceptor()
	call := func(full string, answer any) {
		t.Helper()
		resp, err := ic(context.Background(), "req", &grpc.UnaryServerInfo{FullMethod: full},
			func(context.Context, any) (any, error) { return answer, nil })
		if err != nil || resp != answer {
			t.Fatalf("%s: %v, %v; want the handler's answer", full, resp, err)
		}
	}
	for range 3 {
		call("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", "ok")
	}
	call("/grpc.health.v1.Health/Check", "serving")
	for m, want := range map[string]float64{"ShouldRateLimit": 3, "Check": 1} {
		if got := promtest.Value(t, reg, "ratelimit_service_total_requests", promtest.Labels{"grpc_method": m}); got != want {
			t.Errorf("total_requests{grpc_method=%q} = %v, want %v", m, got, want)
		}
		h := promtest.Find(t, reg, "ratelimit_service_response_time_seconds", promtest.Labels{"grpc_method": m})
		if len(h) != 1 || float64(h[0].GetHistogram().GetSampleCount()) != want {
			t.Errorf("response_time_seconds{grpc_method=%q}: %v, want %v samples", m, h, want)
		}
	}
	times := sink.take("ratelimit_server.")
	if len(times) != 4 || !strings.HasPrefix(times[0], "ratelimit_server.ShouldRateLimit.response_time.__env=t:") ||
		!strings.HasPrefix(times[3], "ratelimit_server.Check.response_time.__env=t:") {
		t.Errorf("statsd timers: %q", times)
	}
	st.FlushStatsd()
	got := strings.Join(sink.take("ratelimit_server."), "\n") + "\n"
	for _, want := range []string{"ratelimit_server.ShouldRateLimit.total_requests.__env=t:3|c\n", "ratelimit_server.Check.total_requests.__env=t:1|c\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("flush lacks %q:\n%s", want, got)
		}
	}
}

// TestStatsdNamesFromRequestsStayOneLine: names that come from requests
// (a descriptor's value with detailed_metric, a domain the configuration
// does not have) are sent to statsd as one line each: a newline or
// another control character in them is replaced, as ':' and '|' are, so
// a caller cannot add lines of its own to what statsd receives.
func TestStatsdNamesFromRequestsStayOneLine(t *testing.T) {
	t.Parallel()
	sink := &lines{}
	st, c := detailedUsers(t, prometheus.NewRegistry(), StatsOptions{Statsd: sink})
	ask(t, c, "d", desc("user", "a\nevil.injected:999|g\r\x00\x7f"))
	ask(t, c, "x\nevil.domain", desc("user", "b"))
	st.FlushStatsd()
	var names []string
	for _, l := range sink.take("") {
		name := l[:strings.LastIndexByte(l, ':')]
		if strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) || strings.ContainsAny(name, ":|") {
			t.Errorf("a statsd name with a control character, ':' or '|': %q", name)
		}
		names = append(names, name)
	}
	all := strings.Join(names, "\n")
	for _, want := range []string{
		"ratelimit.service.rate_limit.d.user_a_evil.injected_999_g___.total_hits",
		"ratelimit.service.rate_limit.x_evil.domain.domain_not_found",
	} {
		if !strings.Contains(all+"\n", want+"\n") {
			t.Errorf("no %s among:\n%s", want, all)
		}
	}
}

// detailedUsers starts a service with statistics of opts registered in
// reg, over one domain d whose descriptor user counts each value by name
// (detailed_metric), 100 a minute.
func detailedUsers(t *testing.T, reg prometheus.Registerer, opts StatsOptions) (*Stats, rlsv3.RateLimitServiceClient) {
	t.Helper()
	st, err := NewStats(reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := startService(t, mustParse(t, `
domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
`), newClock(), Options{Stats: st})
	return st, c
}

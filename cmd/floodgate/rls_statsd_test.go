package main

import (
	"bufio"
	"context"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// statsdPeerLines are the counters envoyproxy/ratelimit sent over TCP to
// statsd for the requests of TestRLSCommandSendsStatsdAsEnvoyproxyRatelimit
// (EXTRA_TAGS=env:pro.d,zone:a), summed over its flushes. It also sent,
// for each of the ten calls, a line
// ratelimit_server.ShouldRateLimit.response_time.__env=pro_d.__zone=a:0|ms,
// and the Go runtime's gauges and counters under ratelimit.go; and
// ratelimit.redis_pool.* and runtime.*, which floodgate rls does not send
// (docs/envoy.md).
var statsdPeerLines = `
ratelimit.service.config_load_success.__env=pro_d.__zone=a:1|c
ratelimit.service.rate_limit.nope.domain_not_found.__env=pro_d.__zone=a:2|c
ratelimit.service.rate_limit.test.key1.near_limit.__env=pro_d.__zone=a:1|c
ratelimit.service.rate_limit.test.key1.over_limit.__env=pro_d.__zone=a:2|c
ratelimit.service.rate_limit.test.key1.total_hits.__env=pro_d.__zone=a:5|c
ratelimit.service.rate_limit.test.key1.within_limit.__env=pro_d.__zone=a:3|c
ratelimit.service.rate_limit.test.key2_v.total_hits.__env=pro_d.__zone=a:4|c
ratelimit.service.rate_limit.test.key2_v.within_limit.__env=pro_d.__zone=a:4|c
ratelimit.service.rate_limit.test.shadow.near_limit.__env=pro_d.__zone=a:1|c
ratelimit.service.rate_limit.test.shadow.over_limit.__env=pro_d.__zone=a:1|c
ratelimit.service.rate_limit.test.shadow.shadow_mode.__env=pro_d.__zone=a:1|c
ratelimit.service.rate_limit.test.shadow.total_hits.__env=pro_d.__zone=a:2|c
ratelimit.service.rate_limit.test.shadow.within_limit.__env=pro_d.__zone=a:1|c
ratelimit_server.ShouldRateLimit.total_requests.__env=pro_d.__zone=a:10|c
`

// TestRLSCommandSendsStatsdAsEnvoyproxyRatelimit: with envoyproxy/ratelimit's
// default USE_STATSD, floodgate rls sends its statistics to
// STATSD_HOST:STATSD_PORT over TCP every STATS_FLUSH_INTERVAL, with its
// names, values, types and EXTRA_TAGS: every line that arrives is one
// envoyproxy/ratelimit sent for the same requests.
func TestRLSCommandSendsStatsdAsEnvoyproxyRatelimit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lines := make(chan string, 10000)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				sc := bufio.NewScanner(conn)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
		}
	}()
	if left := time.Minute - time.Duration(time.Now().UnixNano())%time.Minute; left < 3*time.Second {
		time.Sleep(left + 10*time.Millisecond)
	}
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"c.yaml": `domain: test
descriptors:
  - key: key1
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: key2
    value: v
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	env := rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory", "FLOODGATE_COMPAT": "true",
		"STATSD_HOST": "127.0.0.1", "STATSD_PORT": port, "STATS_FLUSH_INTERVAL": "300ms", "EXTRA_TAGS": "env:pro.d,zone:a"})
	delete(env, "USE_STATSD") // the default
	p := startRLS(t, env)
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	send := func(n int, domain string, hits uint32, descs ...[2]string) {
		req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits}
		for _, d := range descs {
			req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: d[0], Value: d[1]}}})
		}
		for range n {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := c.ShouldRateLimit(ctx, req)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	send(5, "test", 0, [2]string{"key1", "a"})
	send(2, "test", 2, [2]string{"key2", "v"})
	send(2, "test", 0, [2]string{"shadow", "x"})
	send(1, "nope", 0, [2]string{"a", "b"}, [2]string{"c", "d"})

	want := map[string]uint64{}
	for _, l := range strings.Fields(statsdPeerLines) {
		name, v, _ := strings.Cut(strings.TrimSuffix(l, "|c"), ":")
		want[name], _ = strconv.ParseUint(v, 10, 64)
	}
	const tags = ".__env=pro_d.__zone=a"
	line := regexp.MustCompile(`^([^:]+):(\d+)\|(c|g|ms)$`)
	got := map[string]uint64{}
	timers, gauges := 0, map[string]bool{}
	done := func() bool {
		for k, v := range want {
			if got[k] != v {
				return false
			}
		}
		return timers == 10 && len(gauges) == 12
	}
	deadline := time.After(20 * time.Second)
	for !done() {
		var l string
		select {
		case l = <-lines:
		case <-deadline:
			t.Fatalf("statsd got %v and %d timers, want %v and 10", got, timers, want)
		}
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("not a statsd line: %q", l)
		}
		v, _ := strconv.ParseUint(m[2], 10, 64)
		switch {
		case m[3] == "ms" && m[1] == "ratelimit_server.ShouldRateLimit.response_time"+tags:
			timers++
		case m[3] == "c" && strings.HasPrefix(m[1], "ratelimit.go.") && strings.HasSuffix(m[1], tags):
		case m[3] == "g" && strings.HasPrefix(m[1], "ratelimit.go.") && strings.HasSuffix(m[1], tags):
			gauges[m[1]] = true
		case m[3] == "c":
			if _, ok := want[m[1]]; !ok {
				t.Errorf("a counter envoyproxy/ratelimit did not send: %q", l)
			}
			if v == 0 {
				t.Errorf("a counter of 0 (envoyproxy/ratelimit sends none): %q", l)
			}
			got[m[1]] += v
		default:
			t.Errorf("a line envoyproxy/ratelimit did not send: %q", l)
		}
	}
	for _, g := range []string{"alloc", "sys", "heapAlloc", "heapSys", "heapIdle", "heapInuse", "heapReleased", "heapObjects",
		"nextGC", "lastGC", "gcCPUPercent", "numGoroutine"} {
		if !gauges["ratelimit.go."+g+tags] {
			t.Errorf("no gauge ratelimit.go.%s", g)
		}
	}
	if strings.Contains(p.stderr.String(), "USE_STATSD") {
		t.Errorf("a note about USE_STATSD:\n%s", p.stderr.String())
	}

	// With EXTRA_TAGS, /metrics has envoyproxy/ratelimit's series, named as
	// its exporter names them, and no other ratelimit_ series.
	_, body := httpGet(t, p.debug+"/metrics")
	have := map[string]bool{}
	for _, l := range strings.Split(body, "\n") {
		have[l] = true
	}
	for _, l := range strings.Split(strings.TrimSpace(statsdPeerPrometheus), "\n") {
		if !have[l] {
			t.Errorf("/metrics lacks %s", l)
		}
	}
	for _, l := range []string{
		"# TYPE ratelimit_server_ShouldRateLimit_response_time___env_pro_d___zone_a summary",
		"ratelimit_server_ShouldRateLimit_response_time___env_pro_d___zone_a_count 10",
		"# TYPE ratelimit_go_numGoroutine___env_pro_d___zone_a gauge",
		"# TYPE ratelimit_go_mallocs___env_pro_d___zone_a counter",
	} {
		if !have[l] {
			t.Errorf("/metrics lacks %s", l)
		}
	}
	for l := range have {
		if strings.HasPrefix(l, "ratelimit_") && !strings.Contains(l, "___env_pro_d___zone_a") {
			t.Errorf("/metrics has %s, which envoyproxy/ratelimit's exporter does not", l)
		}
	}
}

// statsdPeerPrometheus are the series envoyproxy/ratelimit's Prometheus
// exporter (USE_PROMETHEUS=true) gave for the requests of
// TestRLSCommandSendsStatsdAsEnvoyproxyRatelimit with
// EXTRA_TAGS=env:pro.d,zone:a: none of its statistics matches its mapping
// then, so each is a series named after the whole statsd name. Besides,
// ratelimit_server_ShouldRateLimit_response_time___env_pro_d___zone_a was
// a summary of 10 calls, and the Go runtime's ratelimit_go_*___env_pro_d___zone_a
// were there.
var statsdPeerPrometheus = `
ratelimit_server_ShouldRateLimit_total_requests___env_pro_d___zone_a 10
ratelimit_service_config_load_success___env_pro_d___zone_a 1
ratelimit_service_rate_limit_nope_domain_not_found___env_pro_d___zone_a 2
ratelimit_service_rate_limit_test_key1_near_limit___env_pro_d___zone_a 1
ratelimit_service_rate_limit_test_key1_over_limit___env_pro_d___zone_a 2
ratelimit_service_rate_limit_test_key1_total_hits___env_pro_d___zone_a 5
ratelimit_service_rate_limit_test_key1_within_limit___env_pro_d___zone_a 3
ratelimit_service_rate_limit_test_key2_v_total_hits___env_pro_d___zone_a 4
ratelimit_service_rate_limit_test_key2_v_within_limit___env_pro_d___zone_a 4
ratelimit_service_rate_limit_test_shadow_near_limit___env_pro_d___zone_a 1
ratelimit_service_rate_limit_test_shadow_over_limit___env_pro_d___zone_a 1
ratelimit_service_rate_limit_test_shadow_shadow_mode___env_pro_d___zone_a 1
ratelimit_service_rate_limit_test_shadow_total_hits___env_pro_d___zone_a 2
ratelimit_service_rate_limit_test_shadow_within_limit___env_pro_d___zone_a 1
`

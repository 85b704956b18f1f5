package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/redistest"
)

// The descriptor files of envoyproxy/ratelimit's integration test (its Go
// test reads basic, another, share-threshold-test and, once copied in,
// reload; its scripts run behind Envoy against rl), written out here with
// the same limits.
const (
	peerBasicYAML = `domain: basic
descriptors:
  - {key: key1, rate_limit: {unit: second, requests_per_unit: 50}}
  - {key: key1_local, rate_limit: {unit: second, requests_per_unit: 50}}
  - {key: one_per_minute, rate_limit: {unit: minute, requests_per_unit: 1}}
`
	peerAnotherYAML = `domain: another
descriptors:
  - {key: key2, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: key3, rate_limit: {unit: hour, requests_per_unit: 10}}
  - {key: key2_local, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: key3_local, rate_limit: {unit: hour, requests_per_unit: 10}}
  - {key: key4, rate_limit: {unit: day, requests_per_unit: 20}}
  - {key: key4_local, rate_limit: {unit: day, requests_per_unit: 20}}
`
	peerShareYAML = `domain: share-threshold-test
descriptors:
  - {key: files, value: files/*, share_threshold: true, rate_limit: {unit: hour, requests_per_unit: 10}}
  - {key: files_no_share, value: files_no_share/*, rate_limit: {unit: hour, requests_per_unit: 10}}
`
	peerReloadYAML = `domain: reload
descriptors:
  - {key: key1, rate_limit: {unit: second, requests_per_unit: 50}}
  - {key: block, rate_limit: {unit: second, requests_per_unit: 0}}
  - {key: one_per_minute, rate_limit: {unit: minute, requests_per_unit: 1}}
`
	// peerRLYAML is the rl domain of the scripts; UNIT is the unit of the
	// two quota services (minute there).
	peerRLYAML = `domain: rl
descriptors:
  - key: category
    value: account
    rate_limit: {unit: minute, requests_per_unit: 4, replaces: [{name: bkthomps}, {name: fake_name}]}
  - key: source_cluster
    value: proxy
    descriptors:
      - {key: destination_cluster, value: bkthomps, rate_limit: {unit: minute, requests_per_unit: 2, replaces: [{name: bkthomps}]}}
      - {key: destination_cluster, value: mock, rate_limit: {unit: minute, requests_per_unit: 1}}
      - {key: destination_cluster, value: override, rate_limit: {unit: minute, requests_per_unit: 2, replaces: [{name: banned_limit}]}}
      - {key: destination_cluster, value: fake, rate_limit: {name: fake_name, unit: minute, requests_per_unit: 2}}
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 2}
    descriptors:
      - {key: bar, rate_limit: {unit: minute, requests_per_unit: 3}}
      - {key: bar, value: bkthomps, rate_limit: {name: bkthomps, unit: minute, requests_per_unit: 1}}
      - {key: bar, value: banned, rate_limit: {name: banned_limit, unit: minute, requests_per_unit: 0}}
      - {key: baz, rate_limit: {unit: second, requests_per_unit: 1}}
      - {key: baz, value: not-so-shady, rate_limit: {unit: minute, requests_per_unit: 3}}
      - {key: baz, value: shady, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 3}}
      - {key: bay, rate_limit: {unlimited: true}}
  - {key: unspec, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: qux, rate_limit: {unlimited: true}}
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: UNIT, requests_per_unit: 1}
    metadata: {service_with_quota: {name: service_1}}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: UNIT, requests_per_unit: 2}
    metadata: {service_with_quota: {name: service_2}}
`
)

// peerVariant is one settings variant of envoyproxy/ratelimit's
// integration test: the environment floodgate rls runs with, and how to
// empty its stores between scenarios.
type peerVariant struct {
	name  string
	env   map[string]string
	local bool // LOCAL_CACHE_SIZE_IN_BYTES set: the peer's keys get "_local"
	flush func() error
}

// peerStep is one request and the answer envoyproxy/ratelimit gives it,
// written by answerText. want "" asks without looking at the answer (the
// hit Envoy sends when a stream is done). served sends, in place of req,
// that hit for the service the previous answer's metadata named.
type peerStep struct {
	req    *rlsv3.RateLimitRequest
	want   string
	served bool
}

func entries(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func withHits(n uint64, d *ratelimitv3.RateLimitDescriptor) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func rlReq(domain string, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// The descriptors Envoy sends for the scripts' routes (the peer's
// examples/envoy/proxy.yaml): one per action list whose headers are all
// present.
func twoHeader(foo, bar, baz string) *rlsv3.RateLimitRequest {
	r := rlReq("rl")
	if bar != "" {
		r.Descriptors = append(r.Descriptors, entries("foo", foo, "bar", bar))
	}
	if baz != "" {
		r.Descriptors = append(r.Descriptors, entries("foo", foo, "baz", baz))
	}
	return r
}

func fourHeader(foo, bar, dst string) *rlsv3.RateLimitRequest {
	return rlReq("rl", entries("foo", foo, "bar", bar), entries("source_cluster", "proxy", "destination_cluster", dst))
}

func fiveHeader(foo, bar, dst string) *rlsv3.RateLimitRequest {
	r := fourHeader(foo, bar, dst)
	r.Descriptors = append(r.Descriptors, entries("category", "account"))
	return r
}

// The quota routes: /quota asks for both services; /tokenquota checks
// service_2 (0 hits) and charges it when the stream is done;
// /multiservice-tokenquota checks both and charges the one that served.
func quotaReq() *rlsv3.RateLimitRequest {
	return rlReq("rl", entries("service", "service_1"), entries("service", "service_2"))
}

func tokenCheck() *rlsv3.RateLimitRequest {
	return rlReq("rl", withHits(0, entries("service", "service_2")))
}

func tokenDone() *rlsv3.RateLimitRequest {
	return rlReq("rl", withHits(1, entries("service", "service_2")))
}

func multiCheck() *rlsv3.RateLimitRequest {
	return rlReq("rl", withHits(0, entries("service", "service_1")), withHits(0, entries("service", "service_2")))
}

// answerText writes an answer as "OVERALL: STATUS, STATUS [served]", each
// status its code and, with a limit, "n/UNIT left"; [served] is the
// service_with_quota name of the dynamic metadata.
func answerText(r *rlsv3.RateLimitResponse) string {
	var parts []string
	for _, s := range r.GetStatuses() {
		p := s.GetCode().String()
		if l := s.GetCurrentLimit(); l != nil {
			p += fmt.Sprintf(" %d/%s %d", l.GetRequestsPerUnit(), l.GetUnit(), s.GetLimitRemaining())
		}
		parts = append(parts, p)
	}
	out := r.GetOverallCode().String() + ": " + strings.Join(parts, ", ")
	if n := servedBy(r); n != "" {
		out += " [" + n + "]"
	}
	return out
}

func servedBy(r *rlsv3.RateLimitResponse) string {
	md := r.GetDynamicMetadata().GetFields()["metadata"].GetStructValue()
	return md.GetFields()["service_with_quota"].GetStructValue().GetFields()["name"].GetStringValue()
}

var unitSeconds = map[string]int64{"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400}

// checkReset: each status with a limit says the time left in its window,
// as envoyproxy/ratelimit does (the unit less the seconds into it).
func checkReset(t *testing.T, r *rlsv3.RateLimitResponse, before, after time.Time) {
	t.Helper()
	for i, s := range r.GetStatuses() {
		l := s.GetCurrentLimit()
		if l == nil {
			continue
		}
		u := unitSeconds[l.GetUnit().String()]
		got := s.GetDurationUntilReset().GetSeconds()
		lo, hi := u-after.Unix()%u, u-before.Unix()%u
		if hi < lo { // a window began during the call
			lo = 1
			hi = u
		}
		if got < lo || got > hi {
			t.Errorf("status %d: duration_until_reset %ds, want %d..%ds (%s)", i, got, lo, hi, l.GetUnit())
		}
	}
}

// awayFromMinuteEnd waits for the next minute when fewer than left remain
// in this one, so that a scenario's minute (and hour, and day) windows
// do not turn during it.
func awayFromMinuteEnd(left time.Duration) {
	if rem := time.Minute - time.Duration(time.Now().UnixNano())%time.Minute; rem < left {
		time.Sleep(rem + 20*time.Millisecond)
	}
}

// authDo sends AUTH then one inline command to a Redis that wants a
// password, and returns the second reply's first line.
func authDo(addr, pass string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "AUTH %s\r\n%s\r\n", pass, strings.Join(args, " ")); err != nil {
		return "", err
	}
	br := bufio.NewReader(c)
	var line string
	for i := 0; i < 2; i++ {
		if line, err = br.ReadString('\n'); err != nil {
			return "", err
		}
		if strings.HasPrefix(line, "-") {
			return "", fmt.Errorf("%s", strings.TrimSpace(line))
		}
	}
	return strings.TrimSpace(line), nil
}

func flushAll(servers ...*redistest.Server) func() error {
	return func() error {
		for _, s := range servers {
			if _, err := s.Do("FLUSHALL"); err != nil {
				return err
			}
		}
		return nil
	}
}

func flushAllAuth(pass string, servers ...*redistest.Server) func() error {
	return func() error {
		for _, s := range servers {
			if _, err := authDo(s.Addr, pass, "FLUSHALL"); err != nil {
				return err
			}
		}
		return nil
	}
}

// requirePass makes a running server want a password, as the peer's
// Redis instances with "requirepass password123".
func requirePass(t *testing.T, s *redistest.Server, pass string) {
	t.Helper()
	if _, err := s.Do("CONFIG", "SET", "requirepass", pass); err != nil {
		t.Fatal(err)
	}
}

// peerScenarioRun is one floodgate rls started for one scenario.
type peerScenarioRun struct {
	t      *testing.T
	p      *rlsProc
	c      rlsv3.RateLimitServiceClient
	dir    string
	served string
}

func startPeerScenario(t *testing.T, v peerVariant, quotaUnit string, extra map[string]string) *peerScenarioRun {
	t.Helper()
	if err := v.flush(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"basic.yaml": peerBasicYAML, "another.yaml": peerAnotherYAML,
		"share_threshold.yaml": peerShareYAML, "example.yaml": strings.ReplaceAll(peerRLYAML, "UNIT", quotaUnit)})
	if err := os.WriteFile(filepath.Join(dir, "ratelimit", "reload.yaml"), []byte(peerReloadYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"FLOODGATE_COMPAT": "true", "RESPONSE_DYNAMIC_METADATA": "true",
		// A store slow to answer (a loaded machine, the race detector)
		// must not hand the decision to the failure policy.
		"FLOODGATE_STORE_TIMEOUT": "10s"}
	for k, val := range v.env {
		env[k] = val
	}
	for k, val := range extra {
		env[k] = val
	}
	p := startRLS(t, rlsEnvFor(dir, env))
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &peerScenarioRun{t: t, p: p, c: rlsv3.NewRateLimitServiceClient(conn), dir: dir}
}

func (r *peerScenarioRun) ask(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := time.Now()
	resp, err := r.c.ShouldRateLimit(ctx, req)
	if err != nil {
		r.t.Fatalf("%v: %v", req, err)
	}
	checkReset(r.t, resp, before, time.Now())
	return resp
}

// run sends the steps in order and compares each answer.
func (r *peerScenarioRun) run(steps []peerStep) {
	r.t.Helper()
	for i, s := range steps {
		req := s.req
		if s.served {
			if r.served == "" {
				r.t.Fatalf("step %d: no service was named", i+1)
			}
			req = rlReq("rl", withHits(1, entries("service", r.served)))
		}
		resp := r.ask(req)
		r.served = servedBy(resp)
		if s.want != "" {
			if got := answerText(resp); got != s.want {
				r.t.Errorf("step %d: %s\n got %s\nwant %s", i+1, descText(req), got, s.want)
			}
		}
	}
}

func descText(r *rlsv3.RateLimitRequest) string {
	var ds []string
	for _, d := range r.GetDescriptors() {
		var es []string
		for _, e := range d.GetEntries() {
			es = append(es, e.GetKey()+"="+e.GetValue())
		}
		s := strings.Join(es, ",")
		if d.GetHitsAddend() != nil {
			s += fmt.Sprintf(" (hits %d)", d.GetHitsAddend().GetValue())
		}
		ds = append(ds, "("+s+")")
	}
	return r.GetDomain() + " " + strings.Join(ds, " ")
}

// metrics checks that /metrics has every line of want.
func (r *peerScenarioRun) metrics(want ...string) {
	r.t.Helper()
	_, body := httpGet(r.t, r.p.debug+"/metrics")
	for _, l := range want {
		if !strings.Contains(body, "\n"+l+"\n") {
			r.t.Errorf("/metrics lacks %s", l)
		}
	}
}

// metric returns the value of one series of /metrics, -1 when absent.
func (r *peerScenarioRun) metric(series string) float64 {
	r.t.Helper()
	_, body := httpGet(r.t, r.p.debug+"/metrics")
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

func repeat(n int, s peerStep) []peerStep {
	out := make([]peerStep, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// peerScripts are envoyproxy/ratelimit's integration-test scripts, each as
// the requests Envoy sends the rate-limit service for its curl calls and
// the answers that make the script pass (the peer's own answers, checked by
// hand against it). The wait of a minute that ends three of them is in
// TestRLSCommandPeerIntegrationWindowPasses.
var peerScripts = []struct {
	name    string
	steps   []peerStep
	metrics []string
}{
	{name: "simple-get", steps: []peerStep{
		// foo and baz: only the (foo, baz) action list is complete.
		{req: twoHeader("test", "", "shady"), want: "OK: OK 3/MINUTE 2"},
	}},
	{name: "trigger-ratelimit", steps: []peerStep{
		{req: twoHeader("pelle", "", "not-so-shady"), want: "OK: OK 3/MINUTE 2"},
		{req: twoHeader("pelle", "", "not-so-shady"), want: "OK: OK 3/MINUTE 1"},
		{req: twoHeader("pelle", "", "not-so-shady"), want: "OK: OK 3/MINUTE 0"},
		{req: twoHeader("pelle", "", "not-so-shady"), want: "OVER_LIMIT: OVER_LIMIT 3/MINUTE 0"},
		{req: twoHeader("pelle", "", "not-so-shady"), want: "OVER_LIMIT: OVER_LIMIT 3/MINUTE 0"},
	}},
	{name: "trigger-shadow-mode-key", steps: []peerStep{
		{req: twoHeader("pelle", "", "shady"), want: "OK: OK 3/MINUTE 2"},
		{req: twoHeader("pelle", "", "shady"), want: "OK: OK 3/MINUTE 1"},
		{req: twoHeader("pelle", "", "shady"), want: "OK: OK 3/MINUTE 0"},
		{req: twoHeader("pelle", "", "shady"), want: "OK: OK 3/MINUTE 0"},
		{req: twoHeader("pelle", "", "shady"), want: "OK: OK 3/MINUTE 0"},
		// The script reads x-ratelimit-remaining of a sixth: 0, and OK.
		{req: twoHeader("pelle", "", "shady"), want: "OK: OK 3/MINUTE 0"},
	}, metrics: []string{`ratelimit_service_rate_limit_shadow_mode{domain="rl",key1="foo",key2="baz_shady"} 3`}},
	{name: "value-included-in-stats-key-when-unspecified", steps: []peerStep{
		{req: rlReq("rl", entries("unspec", "unspecified_value")), want: "OK: OK 2/MINUTE 1"},
		{req: rlReq("rl", entries("unspec", "unspecified_value")), want: "OK: OK 2/MINUTE 0"},
		{req: rlReq("rl", entries("unspec", "unspecified_value")), want: "OVER_LIMIT: OVER_LIMIT 2/MINUTE 0"},
	}, metrics: []string{
		// The value is in the name (detailed_metric); the script reads
		// the over_limit series of the statsd exporter: 1.
		`ratelimit_service_rate_limit_over_limit{domain="rl",key1="unspec_unspecified_value"} 1`,
		`ratelimit_service_rate_limit_total_hits{domain="rl",key1="unspec_unspecified_value"} 3`,
	}},
	{name: "replaces", steps: []peerStep{
		// (foo, bar=banned): 0 a minute.
		{req: twoHeader("bkthomps", "banned", ""), want: "OVER_LIMIT: OVER_LIMIT 0/MINUTE 0"},
		{req: fourHeader("bkthomps", "banned", "mock"), want: "OVER_LIMIT: OVER_LIMIT 0/MINUTE 0, OK 1/MINUTE 0"},
		// destination_cluster=override replaces banned_limit with 2.
		{req: fourHeader("bkthomps", "banned", "override"), want: "OK: OK, OK 2/MINUTE 1"},
		{req: fourHeader("bkthomps", "banned", "override"), want: "OK: OK, OK 2/MINUTE 0"},
		{req: fourHeader("bkthomps", "banned", "override"), want: "OVER_LIMIT: OK, OVER_LIMIT 2/MINUTE 0"},
		// The replaced limit (bkthomps, 1) still holds on its own.
		{req: fourHeader("my_foo", "bkthomps", "bkthomps"), want: "OK: OK, OK 2/MINUTE 1"},
		{req: fourHeader("my_foo", "bkthomps", "bkthomps"), want: "OK: OK, OK 2/MINUTE 0"},
		{req: fourHeader("my_foo", "bkthomps", "bkthomps"), want: "OVER_LIMIT: OK, OVER_LIMIT 2/MINUTE 0"},
		{req: fourHeader("my_foo", "bkthomps", "not_bkthomps"), want: "OK: OK 1/MINUTE 0, OK"},
		{req: fourHeader("my_foo", "bkthomps", "not_bkthomps"), want: "OVER_LIMIT: OVER_LIMIT 1/MINUTE 0, OK"},
		{req: fourHeader("my_foo", "bkthomps", "bkthomps"), want: "OVER_LIMIT: OK, OVER_LIMIT 2/MINUTE 0"},
		// category=account replaces both bkthomps and fake_name with 4.
		{req: fiveHeader("my_foo", "bkthomps", "fake"), want: "OK: OK, OK, OK 4/MINUTE 3"},
		{req: fiveHeader("my_foo", "bkthomps", "fake"), want: "OK: OK, OK, OK 4/MINUTE 2"},
		{req: fiveHeader("my_foo", "bkthomps", "fake"), want: "OK: OK, OK, OK 4/MINUTE 1"},
		{req: fiveHeader("my_foo", "bkthomps", "fake"), want: "OK: OK, OK, OK 4/MINUTE 0"},
		{req: fiveHeader("my_foo", "bkthomps", "fake"), want: "OVER_LIMIT: OK, OK, OVER_LIMIT 4/MINUTE 0"},
		{req: twoHeader("foo_2", "bkthomps", ""), want: "OK: OK 1/MINUTE 0"},
		{req: twoHeader("foo_2", "bkthomps", ""), want: "OVER_LIMIT: OVER_LIMIT 1/MINUTE 0"},
		{req: fourHeader("foo_3", "bar_3", "fake"), want: "OK: OK 3/MINUTE 2, OK 2/MINUTE 1"},
		{req: fourHeader("foo_3", "bar_3", "fake"), want: "OK: OK 3/MINUTE 1, OK 2/MINUTE 0"},
		{req: fourHeader("foo_3", "bar_3", "fake"), want: "OVER_LIMIT: OK 3/MINUTE 0, OVER_LIMIT 2/MINUTE 0"},
		{req: fiveHeader("my_foo", "bkthomps", "fake"), want: "OVER_LIMIT: OK, OK, OVER_LIMIT 4/MINUTE 0"},
	}},
	{name: "quota", steps: []peerStep{
		// Quota mode: over only when every quota descriptor is over.
		{req: quotaReq(), want: "OK: OK 1/MINUTE 0, OK 2/MINUTE 1 [service_1]"},
		{req: quotaReq(), want: "OK: OVER_LIMIT 1/MINUTE 0, OK 2/MINUTE 0 [service_2]"},
		{req: quotaReq(), want: "OVER_LIMIT: OVER_LIMIT 1/MINUTE 0, OVER_LIMIT 2/MINUTE 0"},
	}},
	{name: "token-quota", steps: []peerStep{
		{req: tokenCheck(), want: "OK: OK 2/MINUTE 2 [service_2]"}, {req: tokenDone()},
		{req: tokenCheck(), want: "OK: OK 2/MINUTE 1 [service_2]"}, {req: tokenDone()},
		{req: tokenCheck(), want: "OK: OK 2/MINUTE 0 [service_2]"}, {req: tokenDone()},
		// Charged on the way back, so the fourth is the first refused.
		{req: tokenCheck(), want: "OVER_LIMIT: OVER_LIMIT 2/MINUTE 0"},
	}},
	{name: "multiservice-tokenquota", steps: []peerStep{
		{req: multiCheck(), want: "OK: OK 1/MINUTE 1, OK 2/MINUTE 2 [service_1]"}, {served: true},
		{req: multiCheck(), want: "OK: OK 1/MINUTE 0, OK 2/MINUTE 2 [service_1]"}, {served: true},
		// service_1 is out of quota: service_2 serves.
		{req: multiCheck(), want: "OK: OVER_LIMIT 1/MINUTE 0, OK 2/MINUTE 2 [service_2]"}, {served: true},
		{req: multiCheck(), want: "OK: OVER_LIMIT 1/MINUTE 0, OK 2/MINUTE 1 [service_2]"}, {served: true},
		{req: multiCheck(), want: "OK: OVER_LIMIT 1/MINUTE 0, OK 2/MINUTE 0 [service_2]"}, {served: true},
		{req: multiCheck(), want: "OVER_LIMIT: OVER_LIMIT 1/MINUTE 0, OVER_LIMIT 2/MINUTE 0"},
	}},
}

// peerBasic is the peer's basic scenario (its testBasicBaseConfig), run on
// every settings variant: a domain without configuration, a per-second
// limit, a minute limit taken past its end, then a second descriptor
// whose hourly limit runs out first, with the counts of each.
func peerBasic(r *peerScenarioRun, v peerVariant) {
	t := r.t
	key := func(k string) string {
		if v.local {
			return k + "_local"
		}
		return k
	}
	r.run([]peerStep{
		{req: rlReq("foo", entries(key("hello"), "world")), want: "OK: OK"},
		{req: rlReq("basic", entries(key("key1"), "foo")), want: "OK: OK 50/SECOND 49"},
	})
	val := strconv.FormatInt(time.Now().UnixNano(), 10)
	var steps []peerStep
	for i := 0; i < 25; i++ {
		want := fmt.Sprintf("OK: OK 20/MINUTE %d", 19-i)
		if i >= 20 {
			want = "OVER_LIMIT: OVER_LIMIT 20/MINUTE 0"
		}
		steps = append(steps, peerStep{req: rlReq("another", entries(key("key2"), val)), want: want})
	}
	val2 := val + "b"
	for i := 0; i < 15; i++ {
		// The minute limit goes on counting while the hourly one refuses.
		want := fmt.Sprintf("OK: OK 20/MINUTE %d, OK 10/HOUR %d", 19-i, 9-i)
		if i >= 10 {
			want = fmt.Sprintf("OVER_LIMIT: OK 20/MINUTE %d, OVER_LIMIT 10/HOUR 0", 19-i)
		}
		steps = append(steps, peerStep{req: rlReq("another", entries(key("key2"), val2), entries(key("key3"), val2)), want: want})
	}
	r.run(steps)
	// The peer's statistics, named as its statsd exporter names them.
	r.metrics(
		fmt.Sprintf(`ratelimit_service_rate_limit_total_hits{domain="basic",key1="%s"} 1`, key("key1")),
		fmt.Sprintf(`ratelimit_service_rate_limit_total_hits{domain="another",key1="%s"} 40`, key("key2")),
		fmt.Sprintf(`ratelimit_service_rate_limit_over_limit{domain="another",key1="%s"} 5`, key("key2")),
		fmt.Sprintf(`ratelimit_service_rate_limit_total_hits{domain="another",key1="%s"} 15`, key("key3")),
		fmt.Sprintf(`ratelimit_service_rate_limit_over_limit{domain="another",key1="%s"} 5`, key("key3")),
	)
	// A day's window: the reset is the time left in the day (the peer
	// asks twice two seconds apart and sees it fall; checkReset checks
	// each answer against the clock).
	r.run([]peerStep{{req: rlReq("another", entries(key("key4"), "durTest")), want: "OK: OK 20/DAY 19"}})
	if t.Failed() {
		t.Logf("floodgate rls log:\n%s", r.p.stderr.String())
	}
}

// peerShareThreshold is the peer's TestShareThreshold.
func peerShareThreshold(r *peerScenarioRun) {
	steps := repeat(10, peerStep{req: rlReq("share-threshold-test", entries("files", "files/a.pdf"))})
	steps = append(steps, peerStep{req: rlReq("share-threshold-test", entries("files", "files/b.csv")), want: "OVER_LIMIT: OVER_LIMIT 10/HOUR 0"})
	for i := 0; i < 10; i++ {
		steps = append(steps, peerStep{req: rlReq("share-threshold-test", entries("files_no_share", fmt.Sprintf("files_no_share/%d-%d", time.Now().UnixNano(), i))),
			want: "OK: OK 10/HOUR 9"})
	}
	r.run(steps)
}

// peerReload is the peer's testConfigReload: a domain added by a new file,
// then removed with it, each counted as a load.
func peerReload(r *peerScenarioRun) {
	t := r.t
	r.run([]peerStep{{req: rlReq("reload", entries("block", "foo")), want: "OK: OK"}})
	waitLoads := func(n float64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for r.metric("ratelimit_service_config_load_success") < n {
			if time.Now().After(deadline) {
				t.Fatalf("config_load_success stays at %v, want %v:\n%s", r.metric("ratelimit_service_config_load_success"), n, r.p.stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	before := r.metric("ratelimit_service_config_load_success")
	if before < 1 {
		t.Fatalf("config_load_success %v at start", before)
	}
	src, err := os.ReadFile(filepath.Join(r.dir, "ratelimit", "reload.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	writeRuntime(t, r.dir, map[string]string{"reload.yaml": string(src)})
	t0 := time.Now()
	waitLoads(before + 1)
	t.Logf("added in %v", time.Since(t0))
	r.run([]peerStep{
		{req: rlReq("reload", entries("key1", "foo")), want: "OK: OK 50/SECOND 49"},
		{req: rlReq("reload", entries("block", "foo")), want: "OVER_LIMIT: OVER_LIMIT 0/SECOND 0"},
	})
	if err := os.Remove(filepath.Join(r.dir, "ratelimit", "config", "reload.yaml")); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	waitLoads(before + 2)
	t.Logf("removed in %v", time.Since(t0))
	r.run([]peerStep{{req: rlReq("reload", entries("block", "foo")), want: "OK: OK"}})
}

// TestRLSCommandPeerIntegrationScenarios runs envoyproxy/ratelimit's
// integration scenarios against floodgate rls in compatibility mode: its
// Go test's basic scenario on each of its Redis settings variants (plain,
// per-second Redis, local cache, both, key prefix, password, Sentinel,
// Cluster), and on each variant every one of its scripts (the requests
// Envoy sends for them); on plain Redis also its share-threshold, reload
// and EXTRA_TAGS scenarios. Every answer is compared with the one the peer
// gives. docs/envoy.md lists what is not run and why.
func TestRLSCommandPeerIntegrationScenarios(t *testing.T) {
	const pass = "password123"
	main, second := redistest.Start(t), redistest.Start(t)
	authMain, authSecond := redistest.Start(t), redistest.Start(t)
	requirePass(t, authMain, pass)
	requirePass(t, authSecond, pass)
	// Sentinel: a primary with a password behind a sentinel, for each of
	// the two Redis, as the peer's.
	sentPrimary, sentSecond := redistest.Start(t), redistest.Start(t)
	s1 := redistest.StartSentinel(t, sentPrimary, "mymaster")
	s2 := redistest.StartSentinel(t, sentSecond, "mymaster")
	for _, p := range []struct {
		s *redistest.Sentinel
		r *redistest.Server
	}{{s1, sentPrimary}, {s2, sentSecond}} {
		requirePass(t, p.r, pass)
		if _, err := p.s.Do("SENTINEL", "SET", "mymaster", "auth-pass", pass); err != nil {
			t.Fatal(err)
		}
	}
	cluster := redistest.StartCluster(t)
	clusterAddrs := strings.Join(cluster.Addrs(), ",")

	tcp := func(kv ...string) map[string]string {
		m := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_SOCKET_TYPE": "tcp"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	variants := []peerVariant{
		{name: "Redis", env: tcp("REDIS_URL", main.Addr), flush: flushAll(main)},
		{name: "PerSecondRedis", env: tcp("REDIS_URL", main.Addr, "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", second.Addr), flush: flushAll(main, second)},
		{name: "LocalCache", env: tcp("REDIS_URL", main.Addr, "LOCAL_CACHE_SIZE_IN_BYTES", "1000"), local: true, flush: flushAll(main)},
		{name: "PerSecondRedisLocalCache", env: tcp("REDIS_URL", main.Addr, "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", second.Addr,
			"LOCAL_CACHE_SIZE_IN_BYTES", "1000"), local: true, flush: flushAll(main, second)},
		{name: "CachePrefix", env: tcp("REDIS_URL", main.Addr, "CACHE_KEY_PREFIX", "prefix:"), flush: flushAll(main)},
		{name: "Auth", env: tcp("REDIS_URL", authMain.Addr, "REDIS_AUTH", pass, "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", authSecond.Addr,
			"REDIS_PERSECOND_AUTH", pass), flush: flushAllAuth(pass, authMain, authSecond)},
		{name: "Sentinel", env: tcp("REDIS_TYPE", "sentinel", "REDIS_URL", "mymaster,"+s1.Addr, "REDIS_AUTH", pass,
			"REDIS_PERSECOND", "true", "REDIS_PERSECOND_TYPE", "sentinel", "REDIS_PERSECOND_URL", "mymaster,"+s2.Addr, "REDIS_PERSECOND_AUTH", pass),
			flush: flushAllAuth(pass, sentPrimary, sentSecond)},
		{name: "Cluster", env: tcp("REDIS_TYPE", "cluster", "REDIS_URL", clusterAddrs,
			"REDIS_PERSECOND", "true", "REDIS_PERSECOND_TYPE", "cluster", "REDIS_PERSECOND_URL", clusterAddrs), flush: cluster.FlushAll},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Run("basic", func(t *testing.T) {
				awayFromMinuteEnd(3 * time.Second)
				peerBasic(startPeerScenario(t, v, "minute", nil), v)
			})
			for _, sc := range peerScripts {
				t.Run(sc.name, func(t *testing.T) {
					awayFromMinuteEnd(2 * time.Second)
					r := startPeerScenario(t, v, "minute", nil)
					r.run(sc.steps)
					r.metrics(sc.metrics...)
				})
			}
			if v.name != "Redis" {
				return
			}
			t.Run("share-threshold", func(t *testing.T) {
				awayFromMinuteEnd(2 * time.Second)
				peerShareThreshold(startPeerScenario(t, v, "minute", nil))
			})
			t.Run("reload", func(t *testing.T) {
				peerReload(startPeerScenario(t, v, "minute", nil))
			})
			t.Run("extra-tags", func(t *testing.T) {
				r := startPeerScenario(t, v, "minute", map[string]string{"EXTRA_TAGS": "foo:bar,a:b"})
				r.run([]peerStep{{req: rlReq("basic", entries("key1", "foo")), want: "OK: OK 50/SECOND 49"}})
				// The peer's Prometheus exporter names tagged statistics
				// after the whole statsd name and its tags.
				r.metrics("ratelimit_service_rate_limit_basic_key1_total_hits___a_b___foo_bar 1",
					"ratelimit_service_config_load_success___a_b___foo_bar 1")
			})
		})
	}
}

// TestRLSCommandPeerIntegrationWindowPasses: three of the peer's scripts
// (quota, token-quota, multiservice-tokenquota) end by waiting a minute
// and finding the quota back. Here the two services' limits are a second
// long instead, so the wait is one second: each script runs to its
// refusal within one second, then after the next second begins the
// request passes again.
func TestRLSCommandPeerIntegrationWindowPasses(t *testing.T) {
	rs := redistest.Start(t)
	v := peerVariant{name: "Redis", env: map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": rs.Addr}, flush: flushAll(rs)}
	r := startPeerScenario(t, v, "second", nil)
	startOfSecond := func() {
		time.Sleep(time.Second - time.Duration(time.Now().UnixNano())%time.Second + 5*time.Millisecond)
	}
	for _, sc := range []struct {
		name         string
		steps, after []peerStep
	}{
		{"quota", []peerStep{
			{req: quotaReq(), want: "OK: OK 1/SECOND 0, OK 2/SECOND 1 [service_1]"},
			{req: quotaReq(), want: "OK: OVER_LIMIT 1/SECOND 0, OK 2/SECOND 0 [service_2]"},
			{req: quotaReq(), want: "OVER_LIMIT: OVER_LIMIT 1/SECOND 0, OVER_LIMIT 2/SECOND 0"},
		}, []peerStep{{req: quotaReq(), want: "OK: OK 1/SECOND 0, OK 2/SECOND 1 [service_1]"}}},
		{"token-quota", []peerStep{
			{req: tokenCheck(), want: "OK: OK 2/SECOND 2 [service_2]"}, {req: tokenDone()},
			{req: tokenCheck(), want: "OK: OK 2/SECOND 1 [service_2]"}, {req: tokenDone()},
			{req: tokenCheck(), want: "OK: OK 2/SECOND 0 [service_2]"}, {req: tokenDone()},
			{req: tokenCheck(), want: "OVER_LIMIT: OVER_LIMIT 2/SECOND 0"},
		}, []peerStep{{req: tokenCheck(), want: "OK: OK 2/SECOND 2 [service_2]"}}},
		{"multiservice-tokenquota", []peerStep{
			{req: multiCheck(), want: "OK: OK 1/SECOND 1, OK 2/SECOND 2 [service_1]"}, {served: true},
			{req: multiCheck(), want: "OK: OK 1/SECOND 0, OK 2/SECOND 2 [service_1]"}, {served: true},
			{req: multiCheck(), want: "OK: OVER_LIMIT 1/SECOND 0, OK 2/SECOND 2 [service_2]"}, {served: true},
			{req: multiCheck(), want: "OK: OVER_LIMIT 1/SECOND 0, OK 2/SECOND 1 [service_2]"}, {served: true},
			{req: multiCheck(), want: "OK: OVER_LIMIT 1/SECOND 0, OK 2/SECOND 0 [service_2]"}, {served: true},
			{req: multiCheck(), want: "OVER_LIMIT: OVER_LIMIT 1/SECOND 0, OVER_LIMIT 2/SECOND 0"},
		}, []peerStep{{req: multiCheck(), want: "OK: OK 1/SECOND 1, OK 2/SECOND 2 [service_1]"}}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			r.t = t
			startOfSecond()
			began := time.Now().Unix()
			r.run(sc.steps)
			if time.Now().Unix() != began {
				t.Fatal("the steps did not fit in one second: their answers came from two windows")
			}
			startOfSecond()
			r.run(sc.after)
		})
	}
}

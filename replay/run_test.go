package replay

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/policy"
)

func compilePolicy(t testing.TB, yaml string) *policy.Policy {
	t.Helper()
	f, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("config:\n%v", err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// req is a request of a test log.
type req struct {
	at     time.Duration // after t0
	ip     string
	path   string
	method string
	status int
	dur    time.Duration
	key    string
	logged accesslog.Decision
}

func (q req) record() *accesslog.Record {
	r := &accesslog.Record{Time: t0.Add(q.at), Method: q.method, Path: q.path, Status: q.status, Duration: q.dur, Key: q.key, Decision: q.logged}
	if r.Method == "" {
		r.Method = "GET"
	}
	if r.Path == "" {
		r.Path = "/x"
	}
	if r.Status == 0 {
		r.Status = 200
	}
	if q.ip != "" {
		r.ClientIP = netip.MustParseAddr(q.ip)
	}
	return r
}

// writeLog writes reqs as a JSON access log, in the order given (gzipped
// when the name ends in .gz).
func writeLog(t testing.TB, dir, name string, reqs []req) string {
	t.Helper()
	var b []byte
	for _, q := range reqs {
		b = accesslog.AppendJSON(b, q.record())
	}
	path := filepath.Join(dir, name)
	if strings.HasSuffix(name, ".gz") {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(b)
		zw.Close()
		b = gz.Bytes()
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustRun(t testing.TB, o Options) *Report {
	t.Helper()
	r, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func limitReport(t testing.TB, r *Report, name string) LimitReport {
	t.Helper()
	for _, l := range r.Limits {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("no limit %s", name)
	return LimitReport{}
}

const bucketPolicy = `
limits:
  - {name: per-ip, rate: 5, burst: 10, key: client_ip, scope: global}
`

// TestRunSeed replays the seed's example at the log's times: 12 requests
// at once and 5 half a second later meet a bucket of 10 refilled at 5 a
// second: 12 of 17 pass (as floodgate simulate says), in no time.
func TestRunSeed(t *testing.T) {
	t.Parallel()
	var reqs []req
	for range 12 {
		reqs = append(reqs, req{ip: "203.0.113.1"})
	}
	for range 5 {
		reqs = append(reqs, req{at: 500 * time.Millisecond, ip: "203.0.113.1"})
	}
	path := writeLog(t, t.TempDir(), "a.log", reqs)
	r := mustRun(t, Options{Policy: compilePolicy(t, bucketPolicy), Logs: []string{path}})
	l := limitReport(t, r, "per-ip")
	if r.Requests != 17 || r.Allowed != 12 || r.Denied != 5 || l.Seen != 17 || l.Denied != 5 || l.Binding != 5 {
		t.Fatalf("report %+v\nlimit %+v", r, l)
	}
	if len(l.Episodes) != 1 || !l.Episodes[0].Start.Equal(t0) || !l.Episodes[0].End.Equal(t0.Add(500*time.Millisecond)) {
		t.Errorf("episodes %+v", l.Episodes)
	}
	if len(r.TopClients) != 1 || r.TopClients[0].Name != "203.0.113.1" || r.TopClients[0].Denied != 5 {
		t.Errorf("top clients %+v", r.TopClients)
	}
	if a := r.Agreement; a == nil || a.Compared != 17 || a.Matched != 12 || a.ReplayDenied != 5 || a.Unexplained != 5 {
		// The log says "none" for every request (it was made without
		// limits): the replay refuses 5 it shows allowed.
		t.Errorf("agreement %+v", r.Agreement)
	}
}

// TestRunCountOn: a limit counted by outcome holds a reservation while
// the request is in flight (its time plus its duration), as the gateway
// does, and keeps it only for the statuses it counts.
func TestRunCountOn(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, `
limits:
  - {name: login, algorithm: sliding_log, limit: 2, window: 1m, key: client_ip, count_on: [401]}
`)
	ip := "192.0.2.1"
	reqs := []req{
		{at: 0, ip: ip, status: 200, dur: 500 * time.Millisecond},        // reserved, given back at 0.5s
		{at: time.Second, ip: ip, status: 401, dur: 5 * time.Second},     // reserved until 6s, kept
		{at: 2 * time.Second, ip: ip, status: 200, dur: 2 * time.Second}, // reserved until 4s, given back
		{at: 3 * time.Second, ip: ip, status: 429},                       // two held: denied
		{at: 4 * time.Second, ip: ip, status: 401},                       // one held: allowed, kept
		{at: 5 * time.Second, ip: ip, status: 429},                       // two failures: denied
		{at: 7 * time.Second, ip: "192.0.2.2", status: 401},
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{writeLog(t, t.TempDir(), "a.log", reqs)}})
	l := limitReport(t, r, "login")
	if r.Allowed != 5 || r.Denied != 2 || len(l.Episodes) != 1 || !l.Episodes[0].Start.Equal(t0.Add(3*time.Second)) ||
		!l.Episodes[0].End.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("allowed %d denied %d, denials %+v", r.Allowed, r.Denied, l.Episodes)
	}
}

// TestRunConcurrency: a concurrency lease is held for the request's
// duration.
func TestRunConcurrency(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, `
limits:
  - {name: slots, algorithm: concurrency, limit: 2, key: client_ip}
`)
	ip := "192.0.2.1"
	reqs := []req{
		{at: 0, ip: ip, dur: 10 * time.Second},
		{at: time.Second, ip: ip, dur: 2 * time.Second}, // ends at 3s
		{at: 2 * time.Second, ip: ip},                   // two in flight: denied
		{at: 4 * time.Second, ip: ip},                   // one in flight: allowed
		{at: 11 * time.Second, ip: ip},
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{writeLog(t, t.TempDir(), "a.log", reqs)}})
	if r.Allowed != 4 || r.Denied != 1 || !limitReport(t, r, "slots").Episodes[0].Start.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("allowed %d denied %d: %+v", r.Allowed, r.Denied, limitReport(t, r, "slots"))
	}
}

// randomTraffic makes n requests from a few clients over about d, with
// random durations, sorted by arrival.
func randomTraffic(seed uint64, n int, d time.Duration) []req {
	rng := rand.New(rand.NewPCG(seed, 1))
	reqs := make([]req, n)
	for i := range reqs {
		reqs[i] = req{at: time.Duration(rng.Int64N(int64(d))), ip: fmt.Sprintf("203.0.113.%d", 1+rng.IntN(5)),
			dur: time.Duration(rng.Int64N(int64(200 * time.Millisecond)))}
	}
	sort.Slice(reqs, func(i, j int) bool { return reqs[i].at < reqs[j].at })
	return reqs
}

// byEnd orders requests as a log writes them: when they end.
func byEnd(reqs []req) []req {
	out := slices.Clone(reqs)
	sort.SliceStable(out, func(i, j int) bool { return out[i].at+out[i].dur < out[j].at+out[j].dur })
	return out
}

// TestRunOrder: lines written as requests end, several logs given in any
// order, some gzipped: the replay decides in order of arrival, as one
// sorted log; a window shorter than the requests leaves records late.
func TestRunOrder(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, bucketPolicy)
	dir := t.TempDir()
	reqs := randomTraffic(1, 2000, 20*time.Second)
	sorted := mustRun(t, Options{Policy: p, Logs: []string{writeLog(t, dir, "sorted.log", reqs)}})
	if sorted.Denied == 0 || sorted.Allowed == 0 {
		t.Fatalf("the traffic misses a decision: %+v", sorted)
	}
	written := byEnd(reqs)
	one := mustRun(t, Options{Policy: p, Logs: []string{writeLog(t, dir, "end.log", written)}})
	half := len(written) / 2
	a := writeLog(t, dir, "access.log.1.gz", written[:half])
	b := writeLog(t, dir, "access.log", written[half:])
	two := mustRun(t, Options{Policy: p, Logs: []string{b, a}})
	for name, r := range map[string]*Report{"end order": one, "two files": two} {
		if r.Allowed != sorted.Allowed || r.Denied != sorted.Denied || r.Late != 0 ||
			!slices.Equal(r.Timeline.Denied, sorted.Timeline.Denied) {
			t.Errorf("%s: allowed %d denied %d late %d; sorted: %d %d", name, r.Allowed, r.Denied, r.Late, sorted.Allowed, sorted.Denied)
		}
	}
	if two.Logs[0].Format != FormatJSON || two.Logs[1].Lines != int64(half) {
		t.Errorf("logs %+v", two.Logs)
	}
	late := mustRun(t, Options{Policy: p, Logs: []string{writeLog(t, dir, "end2.log", written)}, Window: time.Millisecond})
	if late.Late == 0 || late.MaxLate == 0 || late.MaxLate > Duration(200*time.Millisecond) {
		t.Errorf("late %d by %v", late.Late, late.MaxLate)
	}
}

// TestRunUnreadable: bad lines are counted and shown; a file that is not
// a log at all is an error.
func TestRunUnreadable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeLog(t, dir, "a.log", []req{{ip: "192.0.2.1"}, {ip: "192.0.2.1"}})
	b, _ := os.ReadFile(path)
	os.WriteFile(path, append(append([]byte("{\"time\":\"garbage\"}\n\n"), b...), "{truncated\n"...), 0o644)
	r := mustRun(t, Options{Policy: compilePolicy(t, bucketPolicy), Logs: []string{path}})
	if r.Requests != 2 || r.Logs[0].Skipped != 2 || len(r.Logs[0].Samples) != 2 || !strings.Contains(r.Logs[0].Samples[0], "a.log:1:") {
		t.Errorf("%+v", r.Logs)
	}
	junk := filepath.Join(dir, "junk.log")
	os.WriteFile(junk, []byte(strings.Repeat("hello world\n", 200)), 0o644)
	if _, err := Run(context.Background(), Options{Policy: compilePolicy(t, bucketPolicy), Logs: []string{junk}}); err == nil ||
		!strings.Contains(err.Error(), "does not read as nginx") {
		t.Errorf("junk: %v", err)
	}
	if _, err := Run(context.Background(), Options{Policy: compilePolicy(t, bucketPolicy), Logs: []string{filepath.Join(dir, "missing")}}); err == nil {
		t.Error("a missing file")
	}
}

// live decides reqs as a gateway would with decisions made at the
// requests' instants plus skew, and returns them with the logged decisions
// filled in (so a log of them has times off by -skew from the decisions).
func live(t *testing.T, p *policy.Policy, reqs []req, skew func(i int) time.Duration) []req {
	t.Helper()
	rp, err := NewReplayer(p)
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	type ev struct {
		i  int
		at time.Duration
	}
	evs := make([]ev, len(reqs))
	for i, q := range reqs {
		evs[i] = ev{i, q.at + skew(i)}
	}
	sort.SliceStable(evs, func(a, b int) bool { return evs[a].at < evs[b].at })
	out := slices.Clone(reqs)
	for _, e := range evs {
		q := reqs[e.i]
		rec := Record{Time: t0.Add(e.at).UnixNano(), Method: "GET", Path: "/x", ClientIP: netip.MustParseAddr(q.ip), Status: 200, Key: q.key}
		o := rp.Decide(&rec)
		out[e.i].logged = accesslog.Allow
		out[e.i].status = 200
		if o.Denied {
			out[e.i].logged, out[e.i].status = accesslog.Deny, 429
		}
	}
	return out
}

// TestAgreement: a log whose times are off from the live decisions by
// less than the tolerance differs only at refill boundaries, and each
// difference is explained; a log made under another policy is not.
func TestAgreement(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, bucketPolicy)
	dir := t.TempDir()
	reqs := randomTraffic(2, 3000, 12*time.Second)
	rng := rand.New(rand.NewPCG(3, 3))
	jitter := make([]time.Duration, len(reqs))
	for i := range jitter {
		jitter[i] = time.Duration(rng.Int64N(int64(time.Millisecond)))
	}
	logged := live(t, p, reqs, func(i int) time.Duration { return jitter[i] })
	r := mustRun(t, Options{Policy: p, Logs: []string{writeLog(t, dir, "skewed.log", logged)}})
	a := r.Agreement
	if a == nil || a.Compared != 3000 || a.Matched == a.Compared || a.Unexplained != 0 || a.Boundary == 0 ||
		a.Boundary+a.Reordered != a.Compared-a.Matched {
		t.Fatalf("skewed by up to 1ms: %+v", a)
	}
	for _, m := range a.Mismatches {
		if m.Class == "boundary" && m.Before == m.After {
			t.Errorf("a boundary difference that does not change within the tolerance: %+v", m)
		}
	}
	// Exact times: every decision predicted.
	exact := live(t, p, reqs, func(int) time.Duration { return 0 })
	if r := mustRun(t, Options{Policy: p, Logs: []string{writeLog(t, dir, "exact.log", exact)}}); r.Agreement.Matched != 3000 {
		t.Errorf("exact: %+v", r.Agreement)
	}
	// Decided under a looser policy: differences no timestamp explains.
	loose := live(t, compilePolicy(t, strings.Replace(bucketPolicy, "rate: 5", "rate: 6", 1)), reqs, func(int) time.Duration { return 0 })
	r = mustRun(t, Options{Policy: p, Logs: []string{writeLog(t, dir, "loose.log", loose)}})
	if r.Agreement.Unexplained == 0 {
		t.Errorf("another policy's decisions all explained: %+v", r.Agreement)
	}
	var text bytes.Buffer
	r.WriteText(&text)
	if !strings.Contains(text.String(), "unexplained") {
		t.Errorf("text:\n%s", text.String())
	}
}

// TestAgreementBoundaryCharged: a request logged half a millisecond
// before the refill that let it through is a boundary difference, and the
// replay then charges it as the log says: the next request, which the
// live bucket refused for want of that token, is refused here too, and the
// one boundary stays one difference.
func TestAgreementBoundaryCharged(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, bucketPolicy) // 5 a second, burst 10
	var reqs []req
	for range 10 {
		reqs = append(reqs, req{ip: "203.0.113.1"})
	}
	reqs = append(reqs, req{at: 199500 * time.Microsecond, ip: "203.0.113.1"}, req{at: 350 * time.Millisecond, ip: "203.0.113.1"})
	// Live, the eleventh came at 200 ms, as a token was refilled.
	logged := live(t, p, reqs, func(i int) time.Duration {
		if i == 10 {
			return 500 * time.Microsecond
		}
		return 0
	})
	if logged[10].logged != accesslog.Allow || logged[11].logged != accesslog.Deny {
		t.Fatalf("live decisions: %+v", logged)
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{writeLog(t, t.TempDir(), "a.log", logged)}})
	a := r.Agreement
	if a.Compared != 12 || a.Matched != 11 || a.Boundary != 1 || a.Unexplained != 0 || len(a.Mismatches) != 1 {
		t.Fatalf("agreement %+v", a)
	}
	if m := a.Mismatches[0]; m.Line != 11 || m.Logged != "allow" || m.Replay != "deny" || m.ReplayLimit != "per-ip" || m.After != "allow" {
		t.Errorf("mismatch %+v", m)
	}
	if l := limitReport(t, r, "per-ip"); r.Allowed != 11 || r.Denied != 1 || l.Denied != 1 {
		t.Errorf("report %+v\nlimit %+v", r, l)
	}
}

// TestAgreementPendingBounded: a log made under another policy, from a
// flood of distinct clients, each refused there once and allowed here:
// every difference is unexplained, and the differences kept for pairing
// stay those of the last tolerance, not one per client of the log.
func TestAgreementPendingBounded(t *testing.T) {
	t.Parallel()
	rp, err := NewReplayer(compilePolicy(t, bucketPolicy))
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	ck := newChecker(DefaultTolerance, nil)
	const n = 20000
	most := 0
	for i := range n {
		rec := Record{Time: t0.Add(time.Duration(i) * time.Millisecond).UnixNano(), Line: int64(i + 1), Method: "GET", Path: "/x",
			ClientIP: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), Status: 429, Logged: LoggedDeny}
		rp.prepare(&rec)
		ck.check(rp, &rec)
		most = max(most, len(ck.pending))
	}
	if ck.a.Unexplained != n {
		t.Fatalf("agreement %+v", ck.a)
	}
	t.Logf("%d differences, at most %d counters held for pairing", n, most)
	if most > 2*minPrune {
		t.Errorf("%d counters held for pairing at most, want at most %d", most, 2*minPrune)
	}
}

// TestAgreementReordered: two requests on one counter within the
// tolerance, decided live in the other order than logged.
func TestAgreementReordered(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, `
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 2, key: client_ip}
`)
	ip := "192.0.2.1"
	reqs := []req{
		{at: 0, ip: ip, logged: accesslog.Allow},
		{at: time.Second, ip: ip, logged: accesslog.Deny, status: 429},            // logged first, decided second
		{at: time.Second + 100*time.Microsecond, ip: ip, logged: accesslog.Allow}, // took the last unit
	}
	r := mustRun(t, Options{Policy: p, Logs: []string{writeLog(t, t.TempDir(), "a.log", reqs)}})
	a := r.Agreement
	if a.Matched != 1 || a.Reordered != 2 || a.Unexplained != 0 {
		t.Errorf("%+v", a)
	}
	for _, m := range a.Mismatches {
		if m.Class != "reordered" || m.Counter != "per-ip|ip:"+ip {
			t.Errorf("%+v", m)
		}
	}
}

const comparePolicy = `
routes:
  - {name: api, match: {paths: ["/api/**"]}, upstream: none}
stages: []
keys:
  - {name: k1, plan: basic, sha256: ` + "%s" + `}
plans:
  - {name: basic, rate: 3, burst: 3}
limits:
  - {name: per-ip, rate: RATE, burst: 10, key: client_ip, scope: global}
  - {name: api, algorithm: fixed_window, limit: 30, window: 1s, match: {paths: ["/api/**"]}, key: route}
`

func comparePolicies(t testing.TB) (a, b *policy.Policy) {
	base := strings.Replace(comparePolicy, "%s", config.HashKey("raw-k1"), 1)
	return compilePolicy(t, strings.Replace(base, "RATE", "5", 1)), compilePolicy(t, strings.Replace(base, "RATE", "4", 1))
}

// TestCompareExact: --compare reports exactly the requests that two
// separate replays decide differently.
func TestCompareExact(t *testing.T) {
	t.Parallel()
	pa, pb := comparePolicies(t)
	reqs := randomTraffic(4, 2000, 10*time.Second)
	rng := rand.New(rand.NewPCG(5, 5))
	for i := range reqs {
		if rng.IntN(3) == 0 {
			reqs[i].path = "/api/x"
		}
		if rng.IntN(5) == 0 {
			reqs[i].key = "k1"
		}
	}
	path := writeLog(t, t.TempDir(), "a.log", byEnd(reqs))
	var flips []*Flip
	r := mustRun(t, Options{Policy: pa, PolicyName: "a.yaml", Compare: pb, CompareName: "b.yaml", Logs: []string{path},
		OnFlip: func(f *Flip) { flips = append(flips, f) }})
	// Two separate replays of the same log, request by request.
	separate := func(p *policy.Policy) map[int64]bool {
		denied := map[int64]bool{}
		mustRun(t, Options{Policy: p, Logs: []string{path}, Compare: p, OnFlip: func(*Flip) { t.Fatal("a policy flips against itself") }})
		rp, _ := NewReplayer(p)
		defer rp.Close()
		// The log records decisions (its statuses): each request is
		// held to them, boundaries decided as logged.
		err := Records(context.Background(), Options{Logs: []string{path}}, func(rec *Record) error {
			denied[rec.Line] = rp.Check(rec, DefaultTolerance).Refused()
			return nil
		})
		if rp.ck == nil || rp.ck.a.Boundary == 0 {
			t.Errorf("no boundary in the log: the test does not try one")
		}
		if err != nil {
			t.Fatal(err)
		}
		return denied
	}
	da, db := separate(pa), separate(pb)
	want := map[int64]string{}
	for line, d := range da {
		if d != db[line] {
			want[line] = map[bool]string{true: "to_allowed", false: "to_denied"}[d]
		}
	}
	got := map[int64]string{}
	for _, f := range flips {
		got[f.Line] = f.Direction
	}
	if len(want) == 0 || len(got) != len(want) || int64(len(want)) != r.Compare.Flips {
		t.Fatalf("%d flips reported (%d counted), %d between the separate replays", len(got), r.Compare.Flips, len(want))
	}
	for line, dir := range want {
		if got[line] != dir {
			t.Errorf("line %d: %q, want %q", line, got[line], dir)
		}
	}
	var sum int64
	for _, g := range r.Compare.Groups {
		sum += g.Count
		if len(g.Examples) == 0 || g.Examples[0].Direction != g.Direction || g.Examples[0].Limit != g.Limit {
			t.Errorf("group %+v", g)
		}
	}
	if sum+r.Compare.GroupsLeftOut != r.Compare.Flips || r.Compare.ToDenied+r.Compare.ToAllowed != r.Compare.Flips {
		t.Errorf("groups add up to %d+%d of %d", sum, r.Compare.GroupsLeftOut, r.Compare.Flips)
	}
}

// TestMemoryBounded: ten times the log holds no more records and keys:
// they follow the traffic's rate and the policy's keys, not the log's
// length.
func TestMemoryBounded(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, bucketPolicy)
	dir := t.TempDir()
	short := mustRun(t, Options{Policy: p, Logs: []string{writeLog(t, dir, "short.log", byEnd(randomTraffic(6, 2000, 20*time.Second)))}})
	long := mustRun(t, Options{Policy: p, Logs: []string{writeLog(t, dir, "long.log", byEnd(randomTraffic(6, 20000, 200*time.Second)))}})
	t.Logf("short: %+v; long: %+v", short.Resources, long.Resources)
	if long.Resources.PeakHeld > 2*short.Resources.PeakHeld || long.Resources.PeakKeys > short.Resources.PeakKeys+5 ||
		long.Resources.PeakHeld > 3000 {
		t.Errorf("held %d and %d records, %d and %d keys", short.Resources.PeakHeld, long.Resources.PeakHeld,
			short.Resources.PeakKeys, long.Resources.PeakKeys)
	}
}

// TestReportOutputs: the text, HTML and JSON forms of a report.
func TestReportOutputs(t *testing.T) {
	t.Parallel()
	pa, pb := comparePolicies(t)
	reqs := randomTraffic(7, 2000, 3*time.Hour)
	for i := range 200 { // a burst in the middle
		reqs = append(reqs, req{at: 90*time.Minute + time.Duration(i)*time.Millisecond, ip: "198.51.100.9", path: "/api/b"})
	}
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].at < reqs[j].at })
	path := writeLog(t, t.TempDir(), "a.log", reqs)
	r := mustRun(t, Options{Policy: pa, PolicyName: "a.yaml", Compare: pb, CompareName: "b.yaml", Logs: []string{path}})
	var text, page, js bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"replay of " + path + " (json, 2,200 lines) through a.yaml", "per-ip", "clients refused most:",
		"per 3 minutes", "b.yaml instead of a.yaml", "allowed → denied"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("no %q in\n%s", want, text.String())
		}
	}
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	for _, want := range []string{"<svg", "<polyline", "per-ip", "With <code>b.yaml</code> instead"} {
		if !strings.Contains(html, want) {
			t.Errorf("no %q in the page", want)
		}
	}
	for _, banned := range []string{"<script", "http://", "https://"} {
		if strings.Contains(html, banned) {
			t.Errorf("the page is not self-contained: %q", banned)
		}
	}
	if err := json.NewEncoder(&js).Encode(r); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Requests != r.Requests || back.Compare.Flips != r.Compare.Flips ||
		back.Timeline.Width != r.Timeline.Width {
		t.Errorf("JSON round trip: %v", err)
	}
}

func TestTopK(t *testing.T) {
	t.Parallel()
	k := newTopK(3)
	for i, n := range []int{5, 1, 3} {
		for range n {
			k.add(fmt.Sprint("c", i), "l", int64(i))
		}
	}
	got := k.top(2)
	if len(got) != 2 || got[0].Name != "c0" || got[0].Denied != 5 || got[0].Error != 0 || got[1].Name != "c2" {
		t.Errorf("%+v", got)
	}
	k.add("new", "l", 9) // takes over the smallest counter (c1, 1)
	for _, a := range k.top(3) {
		if a.Name == "new" && (a.Denied != 2 || a.Error != 1) {
			t.Errorf("%+v", a)
		}
	}
}

func TestTimelineCoarsens(t *testing.T) {
	t.Parallel()
	tl := newTimeline(1)
	for i := range 3 * maxBuckets {
		b := tl.bucket(t0.Add(time.Duration(i) * time.Minute).UnixNano())
		tl.Requests[b]++
	}
	tl.finish()
	var sum int64
	for _, v := range tl.Requests {
		sum += v
	}
	if len(tl.Requests) > maxBuckets || time.Duration(tl.Width) != 4*time.Minute || sum != 3*maxBuckets || !tl.Start.Equal(t0) {
		t.Errorf("%d buckets of %v from %v, %d requests", len(tl.Requests), time.Duration(tl.Width), tl.Start, sum)
	}
}

func TestSparkline(t *testing.T) {
	t.Parallel()
	if got := Sparkline([]int64{0, 1, 4, 8, 2}); got != " ▁▄█▂" {
		t.Errorf("%q", got)
	}
	if got := Sparkline([]int64{0, 0}); got != "  " {
		t.Errorf("%q", got)
	}
}

// TestShedReportedAsLogged: requests the log shows shed by overload
// control (503 after their limits allowed them) are compared by their
// limits as logged and counted, not simulated, from the JSON log and from
// the combined one.
func TestShedReportedAsLogged(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, bucketPolicy)
	var recs []*accesslog.Record
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for i := range 4 {
		rec := &accesslog.Record{Time: t0.Add(time.Duration(i) * time.Millisecond), ClientIP: netip.MustParseAddr("203.0.113.9"),
			Method: "GET", Path: "/x", Status: 200, Route: "api", Limit: "per-ip", Decision: accesslog.Allow, Tier: "default"}
		if i%2 == 1 {
			rec.Status, rec.Shed = 503, "queue_full"
		}
		recs = append(recs, rec)
	}
	eachLogFormat(t, recs, func(t *testing.T, path string) {
		r := mustRun(t, Options{Policy: p, Logs: []string{path}})
		a := r.Agreement
		if a == nil || a.Compared != 4 || a.Matched != 4 || a.Shed != 2 {
			t.Fatalf("agreement %+v, want 4 compared and matched, 2 shed", a)
		}
		var text bytes.Buffer
		r.WriteText(&text)
		if !strings.Contains(text.String(), "2 shed by overload control in the log (503): reported as logged, not simulated") {
			t.Errorf("text:\n%s", text.String())
		}
	})
}

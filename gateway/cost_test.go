package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/sfv"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// TestSSEScanner reads the events of a stream cut at every byte, with the
// three line endings: every event's data comes out whole, and an event
// over the cap is skipped without upsetting the ones after it.
func TestSSEScanner(t *testing.T) {
	t.Parallel()
	stream := ": comment\r\nevent: x\r\ndata: {\"a\":1}\r\n\r\n" +
		"data: line one\ndata:line two\n\n" +
		"data: " + strings.Repeat("x", 100) + "\n\n" +
		"data: {\"usage\":{\"total_tokens\":42}}\r\rdata: [DONE]\n\n" +
		"database: no\n\n"
	want := []string{`{"a":1}`, "line one\nline two", `{"usage":{"total_tokens":42}}`, "[DONE]"}
	for cut := 1; cut <= len(stream); cut++ {
		var got []string
		s := sseScanner{maxBytes: 64, onEvent: func(d []byte) { got = append(got, string(d)) }}
		for b := []byte(stream); len(b) > 0; {
			n := min(cut, len(b))
			s.write(b[:n])
			b = b[n:]
		}
		if !slices.Equal(got, want) {
			t.Fatalf("cut every %d bytes: %q, want %q", cut, got, want)
		}
	}
}

func TestJSONInt(t *testing.T) {
	t.Parallel()
	doc := []byte(`{"usage":{"total_tokens":120,"f":12.0,"neg":-1,"frac":1.5,"s":"7"},"max_tokens":64}`)
	for _, c := range []struct {
		path string
		want int64
		ok   bool
	}{
		{"usage.total_tokens", 120, true}, {"max_tokens", 64, true}, {"usage.f", 12, true},
		{"usage.neg", 0, false}, {"usage.frac", 0, false}, {"usage.s", 0, false},
		{"usage", 0, false}, {"usage.total_tokens.x", 0, false}, {"missing", 0, false},
	} {
		got, ok := jsonInt(doc, strings.Split(c.path, "."))
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %d %v, want %d %v", c.path, got, ok, c.want, c.ok)
		}
	}
}

// llmPolicy is an OpenAI-style API's limits: per key, 60 requests and
// tpm tokens a minute (estimated from max_tokens, settled from
// usage.total_tokens), and a failed-login limit counted by outcome.
func llmPolicy(t testing.TB, upstream string, tpm int64) *policy.Policy {
	t.Helper()
	src := fmt.Sprintf(`version: 1
routes:
  - {name: chat, match: {methods: [POST], paths: ["/v1/chat/completions"]}, upstream: %[1]s}
  - {name: login, match: {methods: [POST], paths: ["/login"]}, upstream: %[1]s}
limits:
  - {name: rpm, rate: 60, per: 1m, key: "header:Authorization", match: {routes: [chat]}}
  - name: tpm
    rate: %[2]d
    per: 1m
    key: "header:Authorization"
    match: {routes: [chat]}
    estimate: {body: max_tokens, default: 100}
    actual: {body: usage.total_tokens}
  - {name: login, algorithm: sliding_log, limit: 5, window: 1m, count_on: [401, 403], match: {routes: [login]}}
`, upstream, tpm)
	p := compilePolicy(t, "llm.yaml", src)
	return p
}

// llmGateway is the reverse proxy of llmPolicy in front of h, over a
// memory store on a frozen clock.
func llmGateway(t testing.TB, fr string, h http.HandlerFunc, tpm int64) (string, *upstream) {
	t.Helper()
	up := newUpstream(t, h)
	pm, err := NewPolicyMatcher(Fixed(llmPolicy(t, up.URL, tpm)), PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{Matcher: pm, Engine: limiter.New(newMemStore(t, newTestClock().Now), limiter.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	return serveFront(t, fr, g, nil), up
}

// chat posts a completion request with max_tokens (0: none) and returns the
// answer.
func chat(t testing.TB, c *http.Client, base string, maxTokens int, stream bool) answer {
	t.Helper()
	body := `{"model":"demo","messages":[{"role":"user","content":"hi"}]`
	if maxTokens > 0 {
		body += `,"max_tokens":` + strconv.Itoa(maxTokens)
	}
	if stream {
		body += `,"stream":true`
	}
	body += "}"
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer key-1")
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// remaining returns r of the RateLimit item named name.
func remaining(t testing.TB, a answer, name string) int64 {
	t.Helper()
	items, err := sfv.ParseList(a.header.Get("RateLimit"))
	if err != nil {
		t.Fatalf("RateLimit %q: %v", a.header.Get("RateLimit"), err)
	}
	for _, it := range items {
		if n, _ := it.Name(); n == name {
			r, _ := it.Int("r")
			return r
		}
	}
	t.Fatalf("no %s in RateLimit %q", name, a.header.Get("RateLimit"))
	return 0
}

// usageUpstream answers every completion with usage.total_tokens = total
// and checks that the request body reached it whole.
func usageUpstream(t testing.TB, total int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var in map[string]any
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in["model"] != "demo" {
			t.Errorf("upstream got %v, %v", in, err)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c1","choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":1,"completion_tokens":%d,"total_tokens":%d}}`, total-1, total)
	}
}

// TestTokensSettleBelow reserves max_tokens and gives back what the
// completion did not use: the next request sees the tokens the usage
// said, not the estimate.
func TestTokensSettleBelow(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testTokensSettleBelow)
}

func testTokensSettleBelow(t *testing.T, fr string) {
	frontURL, _ := llmGateway(t, fr, usageUpstream(t, 120), 10000)
	c := newClient(t)
	a := chat(t, c, frontURL, 2000, false)
	if a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	if r := remaining(t, a, "tpm"); r != 8000 {
		t.Fatalf("tpm r=%d while 2000 are reserved, want 8000 (RateLimit: %s)", r, a.header.Get("RateLimit"))
	}
	if !strings.Contains(a.header.Get("RateLimit-Policy"), "rpm") || !strings.Contains(a.header.Get("RateLimit-Policy"), "tpm") {
		t.Errorf("RateLimit-Policy %q lacks a limit", a.header.Get("RateLimit-Policy"))
	}
	a = chat(t, c, frontURL, 0, false) // no max_tokens: the default 100
	if r := remaining(t, a, "tpm"); r != 10000-120-100 {
		t.Fatalf("tpm r=%d, want %d: the first request settled at its usage", r, 10000-120-100)
	}
}

// TestTokensLowEstimates sends requests whose estimates are far below
// what they use: each is admitted on its estimate and settled above it,
// the excess charged as far as the limit allows. The tokens served stay
// within the limit plus one request's overrun, and then requests are
// refused.
func TestTokensLowEstimates(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testTokensLowEstimates)
}

func testTokensLowEstimates(t *testing.T, fr string) {
	const tpm, used, estimate = 1000, 300, 10
	frontURL, up := llmGateway(t, fr, usageUpstream(t, used), tpm)
	c := newClient(t)
	served := 0
	for i := 0; i < 20; i++ {
		a := chat(t, c, frontURL, estimate, false)
		if a.status == http.StatusTooManyRequests {
			break
		}
		if a.status != 200 {
			t.Fatalf("%d %s", a.status, a.body)
		}
		served += used
	}
	if served < tpm || served > tpm+(used-estimate) {
		t.Fatalf("%d tokens served on a limit of %d a minute, want at most one request's overrun (%d) above it", served, tpm, used-estimate)
	}
	if n := up.served.Load(); int(n)*used != served {
		t.Errorf("upstream served %d", n)
	}
	if a := chat(t, c, frontURL, estimate, false); a.status != http.StatusTooManyRequests {
		t.Errorf("after the limit ran out: %d", a.status)
	}
}

// TestTokensStream charges a streamed completion from its final usage
// event: 10 MB of Server-Sent Events pass without being held back (the
// client reads the first event while the upstream waits for it), and the
// gateway allocates far less than the stream's size while it passes.
func TestTokensStream(t *testing.T) {
	forFrontsAlone(t, proxyFronts, testTokensStream)
}

func testTokensStream(t *testing.T, fr string) {
	const size = 10 << 20
	firstRead := make(chan struct{})
	chunk := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("x", 960) + "\"}}]}\n\n"
	frontURL, _ := llmGateway(t, fr, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fl := http.NewResponseController(w)
		_, _ = io.WriteString(w, chunk)
		_ = fl.Flush()
		select { // nothing more until the client has the first event
		case <-firstRead:
		case <-time.After(20 * time.Second):
			t.Error("the client never got the first event: the stream is held back")
			return
		}
		for n := len(chunk); n < size; n += len(chunk) {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":4995,\"total_tokens\":5000}}\n\ndata: [DONE]\n\n")
	}, 100000)
	c := newClient(t)
	body := `{"model":"demo","stream":true,"max_tokens":1000,"messages":[]}`
	req, _ := http.NewRequest("POST", frontURL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer key-1")
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(chunk))
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != chunk {
		t.Fatalf("first event: %q %v", buf[:min(40, len(buf))], err)
	}
	close(firstRead)
	n, err := io.CopyBuffer(io.Discard, resp.Body, buf)
	resp.Body.Close()
	if err != nil || n+int64(len(chunk)) < size {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d bytes allocated while %d bytes streamed", alloc, size)
	if alloc > size/4 {
		t.Errorf("%d bytes allocated while a %d-byte stream passed: the stream is held", alloc, size)
	}
	// The next request sees the usage of the last event, 5000 tokens, not
	// the estimate of 1000.
	a := chat(t, c, frontURL, 10, false)
	if r := remaining(t, a, "tpm"); r != 100000-5000-10 {
		t.Fatalf("tpm r=%d, want %d", r, 100000-5000-10)
	}
}

// TestCountOnConcurrent sends 300 wrong passwords at once to a login
// limit of 5 that counts failures, through a login upstream that takes
// its time: every attempt is in flight together, and the reservations
// held before forwarding let exactly 5 reach the upstream.
func TestCountOnConcurrent(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testCountOnConcurrent)
}

func testCountOnConcurrent(t *testing.T, fr string) {
	const attempts = 300
	release := make(chan struct{})
	var answered atomic.Int64
	frontURL, up := llmGateway(t, fr, func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.WriteHeader(http.StatusUnauthorized)
	}, 1000)
	c := &http.Client{Transport: &http.Transport{MaxConnsPerHost: attempts + 10, MaxIdleConnsPerHost: attempts}}
	defer c.CloseIdleConnections()
	var wg sync.WaitGroup
	codes := make([]int, attempts)
	for i := range codes {
		wg.Go(func() {
			codes[i] = do(t, c, "POST", frontURL+"/login", nil).status
			answered.Add(1)
		})
	}
	// Everything the upstream did not take is answered; then the upstream
	// lets the ones it holds go.
	deadline := time.Now().Add(30 * time.Second)
	for answered.Load()+up.served.Load() < attempts && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	slices.Sort(codes)
	n401 := slices.Index(codes, 429)
	if n := up.served.Load(); n != 5 || n401 != 5 || codes[0] != 401 {
		t.Fatalf("%d of %d concurrent failed logins reached the upstream (%d answered 401), want 5 on a limit of 5", n, attempts, n401)
	}
}

// TestCountOnUpstreamDown gives the reservation back when the upstream
// cannot be reached: the gateway's 502s do not count as failed logins.
func TestCountOnUpstreamDown(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testCountOnUpstreamDown)
}

func testCountOnUpstreamDown(t *testing.T, fr string) {
	frontURL, up := llmGateway(t, fr, nil, 1000)
	up.Close()
	for i := 0; i < 8; i++ {
		if a := do(t, newClient(t), "POST", frontURL+"/login", nil); a.status != http.StatusBadGateway {
			t.Fatalf("attempt %d: %d, want 502 (a limit of 5 counting 401 and 403 only)", i+1, a.status)
		}
	}
}

// TestCostHeaders reads the estimate from a request header and the
// actual cost from a response header, in middleware use; an answer that
// is not a success and does not tell the cost gives the estimate back.
func TestCostHeaders(t *testing.T) {
	t.Parallel()
	forFronts(t, allFronts, testCostHeaders)
}

func testCostHeaders(t *testing.T, fr string) {
	p := compilePolicy(t, "h.yaml", `version: 1
routes:
  - {name: api, match: {paths: ["/**"]}, upstream: none}
limits:
  - name: units
    algorithm: fixed_window
    limit: 100
    window: 1h
    key: global
    estimate: {header: X-Estimate, default: 7}
    actual: {header: X-Used}
`)
	pm, err := NewPolicyMatcher(Fixed(p), PolicyMatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, srvURL, c := startFront(t, fr, Options{Matcher: pm, Engine: limiter.New(newMemStore(t, newTestClock().Now), limiter.Options{})},
		func(w http.ResponseWriter, r *http.Request) {
			if u := r.Header.Get("Used"); u != "" {
				w.Header().Set("X-Used", u)
			}
			if r.Header.Get("Fail") != "" {
				w.WriteHeader(http.StatusBadRequest)
			}
		})
	steps := []struct {
		hdr  map[string]string
		left int64 // r of the next answer, before its own estimate
	}{
		{map[string]string{"X-Estimate": "30", "Used": "12"}, 100 - 12},
		{map[string]string{"Used": "3"}, 100 - 12 - 3},                   // no estimate: the default, 7
		{map[string]string{"X-Estimate": "20"}, 100 - 12 - 3 - 20},       // no actual: the estimate stays
		{map[string]string{"X-Estimate": "9", "Fail": "1"}, 100 - 35},    // 400 without a cost: given back
		{map[string]string{"X-Estimate": "many", "Used": "1"}, 100 - 36}, // not a number: the default
	}
	for i, s := range steps {
		if a := do(t, c, "GET", srvURL, s.hdr); a.status/100 != 2 && s.hdr["Fail"] == "" {
			t.Fatalf("step %d: %d", i, a.status)
		}
		a := do(t, c, "GET", srvURL, map[string]string{"X-Estimate": "1", "Used": "0"})
		if r := remaining(t, a, "units"); r != s.left-1 {
			t.Fatalf("step %d: r=%d, want %d", i, r, s.left-1)
		}
	}
}

package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// post sends a POST with a JSON body through client c.
func post(t *testing.T, c *http.Client, url, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// metricValue reads one sample of /metrics (0 when it is not there).
func metricValue(t *testing.T, admin, series string) int {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\d+)$`)
	m := re.FindStringSubmatch(metricsText(t, admin))
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestConcurrentFailedLogins sends 300 wrong passwords at once from one
// address through "floodgate serve" with the school example in front of
// the demo (whose login takes 200 ms, so the attempts overlap): the login
// limit of 5 a minute, counted by outcome, holds a reservation for every
// attempt in flight, so exactly 5 reach the login upstream and the other
// 295 are answered 429.
func TestConcurrentFailedLogins(t *testing.T) { forEngines(t, testConcurrentFailedLogins) }

func testConcurrentFailedLogins(t *testing.T, engine string) {
	gw, admin, _ := school(t, "--engine", engine)
	loginFlood(t, gw, admin, "")
}

// loginFlood sends 300 wrong passwords to gw's /login at once, from one
// address, and checks that exactly the login limit's capacity, 5, reached
// the upstream (its metrics at admin) and the other 295 got 429. where
// names the store in the failure message.
func loginFlood(t *testing.T, gw, admin, where string) {
	t.Helper()
	const attempts = 300
	c := &http.Client{Transport: &http.Transport{MaxConnsPerHost: attempts, MaxIdleConnsPerHost: attempts}}
	defer c.CloseIdleConnections()
	codes := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range attempts {
		wg.Go(func() {
			code, _, _ := post(t, c, gw+"/login", fmt.Sprintf(`{"user":"ana","password":"guess-%d"}`, i))
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	reached := metricValue(t, admin, `floodgate_upstream_responses_total{code="401",route="login"}`)
	if codes[401] != 5 || codes[429] != attempts-5 || reached != 5 {
		t.Fatalf("300 concurrent failed logins%s: %v, %d reached the upstream; want 5 × 401 (the limit) and 295 × 429", where, codes, reached)
	}
}

// TestLLMExample runs examples/llm.yaml in front of the demo's model: a
// completion reserves its max_tokens and settles at its usage, plain or
// streamed, and the answers carry RateLimit fields for requests and
// tokens.
func TestLLMExample(t *testing.T) { forEngines(t, testLLMExample) }

func testLLMExample(t *testing.T, engine string) {
	gw, _, _, out := startServe(t, "--engine", engine, "--config", filepath.Join("..", "..", "examples", "llm.yaml"), "--demo",
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "warn")
	if !strings.Contains(out.String(), "OpenAI-style") || !strings.Contains(out.String(), "Bearer key-acme-dev") {
		t.Errorf("the demo's lines do not show the model:\n%s", out.String())
	}
	c := &http.Client{}
	ask := func(key string, maxTokens int, stream bool) (int, http.Header, string) {
		return post(t, c, gw+"/v1/chat/completions",
			fmt.Sprintf(`{"model":"demo","max_tokens":%d,"stream":%v,"messages":[{"role":"user","content":"when is sports day"}]}`, maxTokens, stream),
			"Authorization", "Bearer "+key)
	}
	code, hdr, body := ask("key-acme-dev", 1000, false)
	if code != 200 || !strings.Contains(body, `"total_tokens":38`) {
		t.Fatalf("%d %s", code, body)
	}
	pol := hdr.Get("RateLimit-Policy")
	for _, want := range []string{`"acme.rate";q=60;w=60`, `"tokens-per-minute";q=90000;w=60`, `"tokens-per-day";q=2000000;w=86400`} {
		if !strings.Contains(pol, want) {
			t.Errorf("RateLimit-Policy %q lacks %s", pol, want)
		}
	}
	if rl := hdr.Get("RateLimit"); !strings.Contains(rl, `"tokens-per-day";r=1999000;`) {
		t.Errorf("RateLimit %q: want 1,000 tokens reserved of the day's", rl)
	}
	code, _, body = ask("key-acme-prod", 20, true)
	if code != 200 || !strings.HasSuffix(body, "data: [DONE]\n\n") || !strings.Contains(body, `"total_tokens":27`) {
		t.Fatalf("stream: %d %q", code, body)
	}
	// The organisation's day: 38 and 27 used, 10 reserved now.
	_, hdr, _ = ask("key-acme-dev", 10, false)
	if rl := hdr.Get("RateLimit"); !strings.Contains(rl, `"tokens-per-day";r=1999925;`) {
		t.Errorf("RateLimit %q: want the day's quota less 38 + 27 used and 10 reserved", rl)
	}
	if code, _, _ := ask("key-nobody", 10, false); code != http.StatusForbidden {
		t.Errorf("unknown key: %d", code)
	}
}

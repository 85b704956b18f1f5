package httpapi

import (
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestBrowsersChargeNothingWithoutTokens: what a page can make a browser
// send to a check API that takes no token is refused with 403 browser on
// every endpoint and asks the engine nothing: a page of another site
// posting without a CORS preflight (a form, or a fetch in no-cors mode, of
// JSON as text/plain, urlencoded or multipart), marked by Sec-Fetch-Site
// or only by an Origin, and a page whose name was rebound to the API's
// address, which the browser takes for the API's own origin. Services
// (neither field) are served; with tokens, a request carrying one is
// served whoever sent it.
func TestBrowsersChargeNothingWithoutTokens(t *testing.T) {
	t.Parallel()
	url, eng := start(t)
	send := func(url, path, ct string, hdr map[string]string, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("POST", url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ct)
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	bodies := map[string]string{
		"/v1/check":   `{"limit":"login","key":"victim","cost":3}`,
		"/v1/peek":    `{"limit":"login","key":"victim"}`,
		"/v1/reserve": `{"hits":[{"limit":"conc","key":"victim"}],"ttl":60}`,
		"/v1/settle":  `{"reservation":"x","cancel":true}`,
	}
	// What Chromium sends with a form of another site, with a fetch of a
	// page on another port of the same host (same-site), with a fetch of
	// a page whose name now resolves to the API's address, and what a
	// browser without Sec-Fetch-Site sends.
	browsers := []map[string]string{
		{"Origin": "https://attacker.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"},
		{"Origin": "http://localhost:1", "Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors"},
		{"Origin": "http://rebound.example:9091", "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors",
			"Host": "rebound.example:9091"},
		{"Origin": "null", "Sec-Fetch-Site": "cross-site"},
		{"Origin": "https://attacker.example"},
		{"Sec-Fetch-Site": "none"},
	}
	for path, body := range bodies {
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/json"} {
			for _, hdr := range browsers {
				code, answer := send(url, path, ct, hdr, body)
				if code != http.StatusForbidden || !strings.Contains(answer, `"code":"browser"`) {
					t.Errorf("POST %s as %s with %v: %d %s, want 403 browser", path, ct, hdr, code, answer)
				}
			}
		}
	}
	if c, p := eng.checks.Load(), eng.peeks.Load(); c != 0 || p != 0 {
		t.Fatalf("browsers' requests reached the engine: %d checks, %d peeks", c, p)
	}
	// The victim's login limit (3) is whole.
	if code, answer := send(url, "/v1/peek", "application/json", nil, bodies["/v1/check"]); code != http.StatusOK ||
		!strings.Contains(answer, `"remaining":0`) || !strings.Contains(answer, `"allowed":true`) {
		t.Errorf("a service's peek of cost 3: %d %s, want allowed with 0 left", code, answer)
	}

	withTokens := httptest.NewServer(New(eng, testRules(t), Options{Tokens: TokenHashes{sha256.Sum256([]byte("svc")): true}}))
	defer withTokens.Close()
	hdr := map[string]string{"Authorization": "Bearer svc", "Origin": "https://app.example", "Sec-Fetch-Site": "same-origin"}
	if code, answer := send(withTokens.URL, "/v1/peek", "application/json", hdr, bodies["/v1/peek"]); code != http.StatusOK {
		t.Errorf("a browser's peek with a token: %d %s, want 200", code, answer)
	}
	delete(hdr, "Authorization")
	if code, answer := send(withTokens.URL, "/v1/check", "text/plain", hdr, bodies["/v1/check"]); code != http.StatusUnauthorized {
		t.Errorf("a browser's check without a token: %d %s, want 401", code, answer)
	}
}

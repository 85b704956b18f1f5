package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestRLSJSONRefusesBrowsers: pages opened in headless Chromium on the
// machine where floodgate rls serves /json (which takes no token, as
// envoyproxy/ratelimit's) send it what a page can send. A page of another
// site posts without a CORS preflight: a no-cors fetch of a
// RateLimitRequest as text/plain, and a form's text/plain post, which the
// browser navigates to. A page whose name was rebound to the service's
// address (DNS rebinding: here a name the browser resolves to 127.0.0.1,
// and the page's script run in its origin) posts the request as its own
// origin and reads the answer. Before /json told browsers from services,
// the fetch took the victim's whole limit and the rebound page read the
// answer. Each is now refused with 403 and charges nothing: the victim's
// limit is whole when a service asks.
func TestRLSJSONRefusesBrowsers(t *testing.T) {
	ctx, _ := browser(t, chromedp.Flag("host-resolver-rules", "MAP rebound.test 127.0.0.1"))
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"a.yaml": `domain: d
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
`})
	p := startRLS(t, rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory"}))
	api := p.http

	// The attacker's pages, on localhost: another site than 127.0.0.1.
	req := `{"domain": "d", "hitsAddend": 3, "descriptors": [{"entries": [{"key": "user", "value": "victim"}]}]}`
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		switch r.URL.Path {
		case "/fetch":
			fmt.Fprintf(w, `<!doctype html><script>
fetch(%q, {method: "POST", mode: "no-cors", body: %q})
  .then((r) => { window.__sent = r.type; }, (e) => { window.__sent = "failed: " + e; });
</script>`, api+"/json", req)
		case "/form":
			_, _ = io.WriteString(w, textPlainForm(api+"/json", req))
		}
	}))
	defer attacker.Close()
	page := strings.Replace(attacker.URL, "127.0.0.1", "localhost", 1)

	if err := chromedp.Do(ctx, chromedp.Navigate(page+"/fetch")); err != nil {
		t.Fatal(err)
	}
	sent, err := chromedp.Run(ctx, chromedp.Poll[string](`window.__sent`, chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil || sent != "opaque" {
		t.Fatalf("the attacker's fetch: %q %v", sent, err)
	}
	shown := formAnswer(t, ctx, page+"/form", api)
	if !strings.Contains(shown, "answers no browser") {
		t.Errorf("the form's post was answered %q, want 403 answers no browser", shown)
	}
	rebound := strings.Replace(api, "127.0.0.1", "rebound.test", 1)
	if err := chromedp.Do(ctx, chromedp.Navigate(rebound+"/healthcheck")); err != nil {
		t.Fatal(err)
	}
	// Once as it is, once hiding its origin (no Referer, Origin: null).
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`Promise.all(["origin", "no-referrer"].map((p) =>
  fetch("/json", {method: "POST", referrerPolicy: p,
    headers: {"Content-Type": "application/json"}, body: %q}).then((r) => r.text().then((b) => r.status + " " + b))))
  .then((a) => { window.__answers = a.join(" | "); }, (e) => { window.__answers = "failed: " + e; })`, req))); err != nil {
		t.Fatal(err)
	}
	answers, err := chromedp.Run(ctx, chromedp.Poll[string](`window.__answers`, chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil || strings.Count(answers, "403 Forbidden: ") != 2 || strings.Contains(answers, "statuses") {
		t.Errorf("the rebound page read %q (%v), want two 403s and no answer of the service", answers, err)
	}

	resp, err := http.Post(api+"/json", "application/json", strings.NewReader(strings.Replace(req, `"hitsAddend": 3`, `"hitsAddend": 1`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"limitRemaining":2`) {
		t.Errorf("a service's request after the attacker's pages: %d %s, want 200 with 2 left", resp.StatusCode, raw)
	}
}

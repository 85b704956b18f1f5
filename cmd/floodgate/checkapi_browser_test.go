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

// TestCheckAPIWithoutTokensRefusesBrowsers: pages opened in headless
// Chromium on the machine where floodgate serve's check API listens on
// loopback without tokens (api_auth: none) send it what a page can send.
// A page of another site posts without a CORS preflight: a no-cors fetch
// of JSON as text/plain to /v1/check and /v1/reserve, and a form's
// text/plain post to /v1/check, which the browser navigates to. A page
// whose name was rebound to the API's address (DNS rebinding: here a name
// the browser resolves to 127.0.0.1, and the page's script run in its
// origin) posts JSON to /v1/check as its own origin and reads the answer.
// Before the check API told browsers from services, the fetches took the
// victim's whole login limit and held its one concurrency slot for an
// hour, and the rebound page's check was answered. Each is now refused
// with 403 and charges nothing: the victim's limit and slot are whole when
// a service asks.
func TestCheckAPIWithoutTokensRefusesBrowsers(t *testing.T) {
	ctx, _ := browser(t, chromedp.Flag("host-resolver-rules", "MAP rebound.test 127.0.0.1"))
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  api_listen: 127.0.0.1:0
  api_auth: none
limits:
  - {name: login, algorithm: fixed_window, limit: 3, window: 1h}
  - {name: slots, algorithm: concurrency, limit: 1, lease_ttl: 1h}
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: %s
`, up.URL))
	_, _, _, out := startServe(t, "--config", cfg, "--log-level", "error")
	api := "http://" + listenedOn(t, out.String(), apiOn)

	// The attacker's pages, on localhost: another site than 127.0.0.1.
	check := `{"limit": "login", "key": "victim", "cost": 3}`
	reserve := `{"hits": [{"limit": "slots", "key": "victim"}], "ttl": 3600}`
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		switch r.URL.Path {
		case "/fetch":
			fmt.Fprintf(w, `<!doctype html><script>
Promise.allSettled([
  fetch(%[1]q, {method: "POST", mode: "no-cors", body: %[2]q}),
  fetch(%[3]q, {method: "POST", mode: "no-cors", body: %[4]q}),
]).then((r) => { window.__sent = r.map((x) => x.status).join(","); });
</script>`, api+"/v1/check", check, api+"/v1/reserve", reserve)
		case "/form":
			_, _ = io.WriteString(w, textPlainForm(api+"/v1/check", check))
		}
	}))
	defer attacker.Close()
	page := strings.Replace(attacker.URL, "127.0.0.1", "localhost", 1)

	if err := chromedp.Do(ctx, chromedp.Navigate(page+"/fetch")); err != nil {
		t.Fatal(err)
	}
	sent, err := chromedp.Run(ctx, chromedp.Poll[string](`window.__sent`, chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil || sent != "fulfilled,fulfilled" {
		t.Fatalf("the attacker's fetches: %q %v", sent, err)
	}
	shown := formAnswer(t, ctx, page+"/form", api)
	if !strings.Contains(shown, `"code":"browser"`) {
		t.Errorf("the form's post was answered %s, want 403 browser", shown)
	}
	rebound := strings.Replace(api, "127.0.0.1", "rebound.test", 1)
	if err := chromedp.Do(ctx, chromedp.Navigate(rebound+"/")); err != nil {
		t.Fatal(err)
	}
	// Once as it is, once hiding its origin (no Referer, Origin: null).
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`Promise.all(["origin", "no-referrer"].map((p) =>
  fetch("/v1/check", {method: "POST", referrerPolicy: p === "origin" ? "origin" : "no-referrer",
    headers: {"Content-Type": "application/json"}, body: %q}).then((r) => r.status + " " + r.url)))
  .then((a) => { window.__answers = a.join(", "); })`, check))); err != nil {
		t.Fatal(err)
	}
	answers, err := chromedp.Run(ctx, chromedp.Poll[string](`window.__answers`, chromedp.WithPollingTimeout(30*time.Second)))
	if want := "403 " + rebound + "/v1/check, 403 " + rebound + "/v1/check"; err != nil || answers != want {
		t.Errorf("the rebound page's checks: %q %v, want %q", answers, err, want)
	}
	peek := func(path, body string) string {
		t.Helper()
		resp, err := http.Post(api+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, raw)
	}
	if got := peek("/v1/peek", check); !strings.HasPrefix(got, "200 ") || !strings.Contains(got, `"allowed":true`) {
		t.Errorf("the victim's login limit after the attacker's pages: %s, want 3 left", got)
	}
	if got := peek("/v1/reserve", reserve); !strings.HasPrefix(got, "200 ") {
		t.Errorf("the victim's one slot after the attacker's pages: %s, want it free", got)
	}
}

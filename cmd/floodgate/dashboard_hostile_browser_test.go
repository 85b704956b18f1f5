package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// hostileSecret signs the tokens of TestDashboardBrowserHostileKeys.
const hostileSecret = "a secret for the hostile values of the dashboard's test"

// hostileToken signs a token for sub.
func hostileToken(t *testing.T, sub string) string {
	t.Helper()
	claims, err := json.Marshal(map[string]any{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc.EncodeToString(claims)
	mac := hmac.New(sha256.New, []byte(hostileSecret))
	mac.Write([]byte(head))
	return head + "." + enc.EncodeToString(mac.Sum(nil))
}

// TestDashboardBrowserHostileKeys: clients who choose their
// user (a token's sub) and a header that a limit counts by get themselves
// among the keys limited most with markup (an img and an svg whose
// handlers would run, a way out of an attribute, a script, a javascript:
// address), bidi overrides and isolates, zero-width, C1, line-separator and
// byte-order characters, and a key as long as keys get. In headless
// Chromium the dashboard shows each key as text: no element, attribute or
// handler of theirs reaches the page, nothing of theirs runs, each
// invisible or reordering character is written out (⟨U+202E⟩) rather than
// obeyed, the long key wraps inside the page, and the page breaks no rule
// of its Content-Security-Policy (a violation is a console error). The
// page is opened with a malformed token in its address (what a link of
// another site can hold): it asks for a token, and works once given one.
func TestDashboardBrowserHostileKeys(t *testing.T) {
	ctx, consoleErrors := browser(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret.txt"), []byte(hostileSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := consoleConfig(t, dir, `  user:
    jwt: {alg: HS256, key_file: secret.txt, claim: sub}`, `  - {name: basic, rate: 100}`)
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(f, `limits:
  - {name: per-user, rate: 1, per: 1h, burst: 1, key: user, match: {paths: ["/open/user"]}}
  - {name: per-tenant, rate: 1, per: 1h, burst: 1, key: "header:X-Tenant", match: {paths: ["/open/tenant"]}}
`)
	f.Close()
	p := startProc(t, "--config", cfg, "--log-level", "warn")

	long := strings.Repeat("W", 250)
	users := []struct{ sub, shown string }{
		{`<img/src=x/onerror=window.__xss=1>`, `<img/src=x/onerror=window.__xss=1>`},
		{`"><svg/onload=window.__xss=2>`, `"><svg/onload=window.__xss=2>`},
		{`</td></tr><script>window.__xss=3</script>`, `</td></tr><script>window.__xss=3</script>`},
		{`javascript:window.__xss=4`, `javascript:window.__xss=4`},
		{"admin\u202Egnp.exe", "admin⟨U+202E⟩gnp.exe"},
		{"ad\u200Bmin\u2066x\u2069\u061C", "ad⟨U+200B⟩min⟨U+2066⟩x⟨U+2069⟩⟨U+061C⟩"},
		{"c1\u0085ls\u2028bom\uFEFF", "c1⟨U+0085⟩ls⟨U+2028⟩bom⟨U+FEFF⟩"},
		{long, long},
	}
	send := func(path, header, value string) {
		t.Helper()
		for i := 0; i < 3; i++ {
			req, _ := http.NewRequest("GET", p.gw+path, nil)
			req.Header.Set(header, value)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if want := []int{200, 429}[min(i, 1)]; resp.StatusCode != want {
				t.Fatalf("%s with %s %q, request %d: %d, want %d", path, header, value, i, resp.StatusCode, want)
			}
		}
	}
	for _, u := range users {
		send("/open/user", "Authorization", "Bearer "+hostileToken(t, u.sub))
	}
	tenant := "<img/src=x/onerror=window.__xss=5>\u202E"
	send("/open/tenant", "X-Tenant", tenant)

	pollJS := func(what, expr string, wait time.Duration) bool {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(wait))); err != nil {
			t.Errorf("waiting for %s: %v\nconsole errors: %v", what, err, consoleErrors())
			return false
		}
		return true
	}
	// A malformed token in the address: the page asks for one.
	if err := chromedp.Do(ctx, chromedp.Navigate(p.admin+"/ui/#traffic&token=%E0%A4%A")); err != nil {
		t.Fatal(err)
	}
	if pollJS("the login form after a malformed token in the address", `!document.querySelector("#login").hidden`, 10*time.Second) {
		if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`document.querySelector("#token").value = "ops-token"; document.querySelector("#login-form").requestSubmit()`)); err != nil {
			t.Fatal(err)
		}
	} else if err := chromedp.Do(ctx, chromedp.Navigate(p.admin+"/ui/?again#traffic&token=ops-token")); err != nil {
		t.Fatal(err)
	}
	if !pollJS("the keys limited most", fmt.Sprintf(`document.querySelectorAll("#top tbody tr").length >= %d`, len(users)+1), 30*time.Second) {
		t.FailNow()
	}

	if v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`String(window.__xss)`)); err != nil || v != "undefined" {
		t.Errorf("a client's key ran in the page: window.__xss = %s (%v)", v, err)
	}
	if n := evalNumber(t, ctx, `document.querySelectorAll("img, svg, iframe, object, embed, script:not([src]), a[href^='javascript' i]").length`); n != 0 {
		t.Errorf("%v elements of the clients' keys in the page", n)
	}
	attrs, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#top *")).flatMap((e) => Array.from(e.attributes).map((a) => e.tagName + " " + a.name))`))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range attrs {
		if _, name, _ := strings.Cut(a, " "); name != "class" && name != "colspan" {
			t.Errorf("an attribute in the keys limited most: %s", a)
		}
	}
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#top tbody tr")).map((tr) => tr.children[1].textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		if !slices.Contains(cells, "user:"+u.shown) {
			t.Errorf("user %q: shown as none of %q; want %q", u.sub, cells, "user:"+u.shown)
		}
	}
	if !slices.ContainsFunc(cells, func(c string) bool { return strings.HasSuffix(c, "=<img/src=x/onerror=window.__xss=5>⟨U+202E⟩") }) {
		t.Errorf("X-Tenant %q: shown as none of %q", tenant, cells)
	}
	if n := evalNumber(t, ctx, `/[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u200b-\u200f\u202a-\u202e\u2028\u2029\u2060-\u2069\ufeff]/.test(document.querySelector("#top").textContent) ? 1 : 0`); n != 0 {
		t.Errorf("an invisible or reordering character in the keys limited most, as is")
	}
	if w := evalNumber(t, ctx, `document.documentElement.scrollWidth - document.documentElement.clientWidth`); w > 0 {
		t.Errorf("a %d-byte key pushes the page %v pixels past the window", len("user:"+long), w)
	}
	screenshot(t, ctx, "dashboard-hostile-keys.png")
	var errs []string
	for _, e := range consoleErrors() {
		if !strings.Contains(e, "status of 401") { // the page's first ask, without a token
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

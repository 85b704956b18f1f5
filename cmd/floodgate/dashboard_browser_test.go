package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium finds Debian's Chromium; scripts/test.sh installs it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed (scripts/test.sh installs it)")
	}
	t.Skip("chromium is not installed (apt-get install chromium, or run scripts/test.sh)")
	return ""
}

// browser starts a headless Chromium with a fresh profile (and the options
// extra) and collects the page's console errors and exceptions.
func browser(t *testing.T, extra ...chromedp.ExecAllocatorOption) (context.Context, func() []string) {
	t.Helper()
	// Chromium keeps its singleton socket in a directory of its own under
	// TMPDIR, which outlives a browser that is stopped; its path must fit
	// a socket's 107 bytes, which t.TempDir's (the test's name in it) may
	// not.
	tmp, err := os.MkdirTemp("", "cr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
		chromedp.Env("TMPDIR=" + tmp),
	}
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	var mu sync.Mutex
	var errs []string
	messages := chromedp.Console(ctx)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == "error" || m.Type == "assert" || m.IsException() {
				mu.Lock()
				errs = append(errs, string(m.Type)+": "+m.String()+" "+m.URL)
				mu.Unlock()
			}
		}
	}()
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), errs...)
	}
}

// loadGenerator sends requests to the gateway (some of them with the API
// key) until stop is called: a few hundred a second, enough to draw.
func loadGenerator(t *testing.T, gw, apiKey string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				req, _ := http.NewRequestWithContext(ctx, "GET", gw+"/open/"+strconv.Itoa(i%7), nil)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	return func() { cancel(); wg.Wait() }
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", path)
}

// evalNumber evaluates a JavaScript expression to a number.
func evalNumber(t *testing.T, ctx context.Context, expr string) float64 {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[float64](expr))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestDashboardBrowser opens the dashboard in headless Chromium while a
// load generator sends traffic: the page loads without console errors, its
// charts grow, the time range selector and a drag across a chart change
// the seconds every chart shows, the panels come in the order of their
// refusals, the 401s and 403s sent are charted per route, a key's quota
// bar moves when the key is used, and each page is captured (-artifacts
// keeps the screenshots; docs/console.md shows them).
func TestDashboardBrowser(t *testing.T) {
	ctx, consoleErrors := browser(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("a demo secret for the dashboard's browser test"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := consoleConfig(t, dir, `  user:
    jwt: {alg: HS256, key_file: secret.txt, claim: sub}`, `  - {name: basic, rate: 100, quota: {limit: 50, period: DAY}}
  - {name: gold, rate: 100, quota: {limit: 1000, period: MONTH}}`)
	// A tight limit on one path so that the charts show 429s too, and one
	// per user, so that a token is verified (and refused 401 when it does
	// not verify).
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(f, `limits:
  - {name: per-path, rate: 20, burst: 20, key: route, match: {paths: ["/open/3"]}}
  - {name: per-ip, rate: 1000, burst: 1000}
  - {name: per-user, rate: 1000, burst: 1000, key: user, match: {paths: ["/open/token"]}}
`)
	f.Close()
	p := startProc(t, "--config", cfg, "--log-level", "warn")
	var acme, globex keyAnswer
	call(t, "POST", p.admin+"/api/v1/keys", "ops-token", map[string]any{"name": "acme", "plan": "basic"}, &acme)
	call(t, "POST", p.admin+"/api/v1/keys", "ops-token", map[string]any{"name": "globex", "plan": "gold"}, &globex)
	for i := 0; i < 30; i++ {
		status(t, p.gw+"/partner/x", globex.Secret)
	}
	stop := loadGenerator(t, p.gw, acme.Secret)
	defer stop()

	if err := chromedp.Do(ctx, chromedp.Navigate(p.admin+"/ui/#traffic&token=ops-token")); err != nil {
		t.Fatal(err)
	}
	// The charts update: the page's count of decisions grows while the
	// load runs.
	pollJS := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			t.Fatalf("waiting for %s: %v\nconsole errors: %v", what, err, consoleErrors())
		}
	}
	pollJS("the first data", `Number(document.body.dataset.total || 0) > 0`)
	first := evalNumber(t, ctx, `Number(document.body.dataset.total)`)
	pollJS("the chart to grow", fmt.Sprintf(`Number(document.body.dataset.total) > %v`, first+50))
	pollJS("a 429 in the list of keys limited most", `document.querySelectorAll("#top tbody td").length >= 4`)
	charts := int(evalNumber(t, ctx, `document.querySelectorAll(".uplot").length`))
	if charts < 3 {
		t.Errorf("%d charts drawn, want one for all and one per limit", charts)
	}

	// Answers refused before any limit: 401s on route open (a token that
	// does not verify), 403s on route partner (no API key).
	for i := 0; i < 15; i++ {
		req, _ := http.NewRequest("GET", p.gw+"/open/token", nil)
		req.Header.Set("Authorization", "Bearer not-a-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a token that does not verify: %d, want 401", resp.StatusCode)
		}
	}
	for i := 0; i < 25; i++ {
		if code := status(t, p.gw+"/partner/x", ""); code != http.StatusForbidden {
			t.Fatalf("no API key: %d, want 403", code)
		}
	}
	pollJS("the 401s charted on route open", `Number((document.querySelector('#refused .chart[data-route="open"]') || {dataset: {}}).dataset.unauthorized || 0) >= 15`)
	pollJS("the 403s charted on route partner", `Number((document.querySelector('#refused .chart[data-route="partner"]') || {dataset: {}}).dataset.forbidden || 0) >= 25`)
	pollJS("the 401s and 403s in the all chart", `Number(document.body.dataset.refused) >= 40`)
	if n := evalNumber(t, ctx, `document.querySelectorAll('#refused .chart .uplot canvas').length`); n < 2 {
		t.Errorf("%v refusal charts drawn, want one per route", n)
	}

	// The panels in the order of their 429s: per-path (the tight one)
	// first, per-ip (never refused, and first by name) after it.
	pollJS("per-path's panel first", `document.querySelector("#charts .chart").dataset.limit === "per-path"`)
	var panels []struct {
		Limit   string `json:"limit"`
		Refused int    `json:"refused"`
	}
	if panels, err = chromedp.Run(ctx, chromedp.Evaluate[[]struct {
		Limit   string `json:"limit"`
		Refused int    `json:"refused"`
	}](`Array.from(document.querySelectorAll("#charts .chart")).map((b) => ({limit: b.dataset.limit, refused: Number(b.dataset.refused)}))`)); err != nil {
		t.Fatal(err)
	}
	pathAt, ipAt := -1, -1
	for i, pn := range panels {
		if i > 0 && pn.Refused > panels[i-1].Refused {
			t.Errorf("panel %d (%s, %d refused) after one with fewer: %+v", i, pn.Limit, pn.Refused, panels)
		}
		switch pn.Limit {
		case "per-path":
			pathAt = i
		case "per-ip":
			ipAt = i
		}
	}
	if pathAt != 0 || ipAt < 0 || panels[0].Refused == 0 {
		t.Errorf("panels %+v: want per-path first with its 429s, and per-ip after it", panels)
	}

	// The time range: 5 minutes by default, then 15 minutes and an hour,
	// on every chart.
	span := func(sel string) string {
		return fmt.Sprintf(`(function () { const b = document.querySelector(%q); return b ? Number(b.dataset.xmax) - Number(b.dataset.xmin) : -1; })()`, sel)
	}
	spanAround := func(what, sel string, secs int) {
		t.Helper()
		pollJS(what, fmt.Sprintf(`Math.abs(%s - %d) <= 2`, span(sel), secs))
	}
	spanAround("a 5-minute window by default", "#chart-all", 300)
	for _, r := range []int{900, 3600, 300} {
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#range button[data-range="%d"]`, r)))); err != nil {
			t.Fatal(err)
		}
		spanAround(fmt.Sprintf("a %d-second window", r), "#chart-all", r)
		spanAround(fmt.Sprintf("a %d-second window on per-path", r), `#charts .chart[data-limit="per-path"]`, r)
		spanAround(fmt.Sprintf("a %d-second window on route partner", r), `#refused .chart[data-route="partner"]`, r)
	}

	// A drag across the all chart, over its last 8% (where this test's
	// traffic is), zooms every chart into that stretch; the zoom stays
	// while new seconds come in, until it is reset.
	rect, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`(function () { const r = document.querySelector("#chart-all .u-over").getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()`))
	if err != nil || len(rect) != 4 {
		t.Fatalf("the all chart's plot: %v %v", rect, err)
	}
	y := rect[1] + rect[3]/2
	from, to := rect[0]+rect[2]*0.92, rect[0]+rect[2]*0.999
	drag := []chromedp.Action[chromedp.Void]{
		chromedp.MouseEvent("mouseMoved", from, y),
		chromedp.MouseEvent("mousePressed", from, y, chromedp.ButtonLeft, chromedp.ClickCount(1)),
	}
	for i := 1; i <= 5; i++ {
		drag = append(drag, chromedp.MouseEvent("mouseMoved", from+(to-from)*float64(i)/5, y, chromedp.ButtonLeft))
	}
	drag = append(drag, chromedp.MouseEvent("mouseReleased", to, y, chromedp.ButtonLeft, chromedp.ClickCount(1)))
	if err := chromedp.Do(ctx, drag...); err != nil {
		t.Fatal(err)
	}
	pollJS("the zoom", `document.body.dataset.zoomed === "true"`)
	zoomed := evalNumber(t, ctx, span("#chart-all"))
	if zoomed < 15 || zoomed > 35 {
		t.Errorf("a drag across 8%% of a 300-second window shows %v seconds", zoomed)
	}
	spanAround("the zoom on per-path too", `#charts .chart[data-limit="per-path"]`, int(zoomed))
	spanAround("the zoom on route partner too", `#refused .chart[data-route="partner"]`, int(zoomed))
	until := evalNumber(t, ctx, `Number(document.body.dataset.until)`)
	pollJS("a new second", fmt.Sprintf(`Number(document.body.dataset.until) > %v`, until+1))
	if now := evalNumber(t, ctx, span("#chart-all")); now != zoomed {
		t.Errorf("the zoom moved with new seconds: %v seconds shown, then %v", zoomed, now)
	}
	screenshot(t, ctx, "dashboard-traffic.png")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#zoom-reset`))); err != nil {
		t.Fatal(err)
	}
	spanAround("the 5-minute window after the reset", "#chart-all", 300)

	// The keys page: acme's quota bar moves when acme is used.
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`location.hash = "#keys"`)); err != nil {
		t.Fatal(err)
	}
	bar := `Number((document.querySelector('#quotas tr[data-key="acme"] [role=progressbar]') || {}).getAttribute ? document.querySelector('#quotas tr[data-key="acme"] [role=progressbar]').getAttribute("aria-valuenow") : -1)`
	pollJS("acme's quota bar", bar+` >= 0`)
	before := evalNumber(t, ctx, bar)
	for i := 0; i < 10; i++ {
		if code := status(t, p.gw+"/partner/x", acme.Secret); code != http.StatusOK {
			t.Fatalf("acme: %d", code)
		}
	}
	pollJS("acme's quota bar to move", fmt.Sprintf(`%s >= %v`, bar, before+20))
	screenshot(t, ctx, "dashboard-keys.png")

	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`location.hash = "#health"`)); err != nil {
		t.Fatal(err)
	}
	pollJS("the instances table", `document.querySelectorAll("#instances tbody tr").length == 1`)
	pollJS("the latency chart", `document.querySelectorAll("#chart-latency .uplot").length == 1`)
	screenshot(t, ctx, "dashboard-health.png")

	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

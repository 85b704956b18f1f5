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

// browser starts a headless Chromium with a fresh profile and collects
// the page's console errors and exceptions.
func browser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	}
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
// charts grow, a key's quota bar moves when the key is used, and each page
// is captured (-artifacts keeps the screenshots; docs/console.md shows
// them).
func TestDashboardBrowser(t *testing.T) {
	ctx, consoleErrors := browser(t)
	cfg := consoleConfig(t, t.TempDir(), "", `  - {name: basic, rate: 100, quota: {limit: 50, period: DAY}}
  - {name: gold, rate: 100, quota: {limit: 1000, period: MONTH}}`)
	// A tight limit on one path so that the charts show 429s too.
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(f, `limits:
  - {name: per-path, rate: 20, burst: 20, key: route, match: {paths: ["/open/3"]}}
  - {name: per-ip, rate: 1000, burst: 1000}
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
	screenshot(t, ctx, "dashboard-traffic.png")

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

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestOpsListenerRefusesReboundPage: headless Chromium opens a page whose
// name resolves to 127.0.0.1 (DNS rebinding: the attacker's name, the ops
// listener's address and port) and its script fetches /metrics as its own
// origin. Before the ops listener checked the Host, the script read the
// whole exposition (routes, upstream targets, shed tenants); now the
// listener answers 421, and the page reads nothing of /metrics.
func TestOpsListenerRefusesReboundPage(t *testing.T) {
	ctx, _ := browser(t, chromedp.Flag("host-resolver-rules", "MAP rebound.test 127.0.0.1"))
	cfg := opsConfig(t, false, "")
	_, _, _, out := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--ops-listen", "127.0.0.1:0", "--log-level", "error")
	ops := opsURL(t, out.String())
	rebound := strings.Replace(ops, "127.0.0.1", "rebound.test", 1)
	if err := chromedp.Do(ctx, chromedp.Navigate(rebound+"/healthz")); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`fetch("/metrics").then((r) => r.text().then((b) => r.status + " " + b.slice(0, 40)))
  .then((a) => { window.__read = a; }, (e) => { window.__read = "error " + e; })`)); err != nil {
		t.Fatal(err)
	}
	read, err := chromedp.Run(ctx, chromedp.Poll[string](`window.__read`, chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(read, "421 ") || strings.Contains(read, "# HELP") {
		t.Errorf("the rebound page read /metrics: %q, want 421", read)
	}
}

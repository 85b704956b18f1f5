package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/alarm"
	"github.com/floodgate/floodgate/internal/redistest"
)

// TestQuotaAlarmsTwoInstances: a plan with a quota of 10 and alarms at 80%
// and 100%, two floodgate serve processes sharing a Redis, one key used
// through both: exactly one webhook per threshold, each correctly signed.
func TestQuotaAlarmsTwoInstances(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	secret := "hook-secret-42"
	type delivery struct {
		ev    alarm.Event
		valid bool
	}
	var mu sync.Mutex
	var got []delivery
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev alarm.Event
		_ = json.Unmarshal(body, &ev)
		valid := alarm.Verify([]byte(secret), r.Header.Get("X-Floodgate-Timestamp"), body, r.Header.Get("X-Floodgate-Signature"))
		mu.Lock()
		got = append(got, delivery{ev, valid})
		mu.Unlock()
	}))
	defer hook.Close()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hook.secret"), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := consoleConfig(t, dir, fmt.Sprintf("  store: redis://%s/0\n  store_timeout: 1s", rs.Addr), fmt.Sprintf(`  - name: small
    rate: 100
    quota: {limit: 10, period: DAY}
    alarms: {thresholds: [80, 100], webhook: %q, secret_file: hook.secret}`, hook.URL))
	procs := []*proc{startProc(t, "--config", cfg, "--log-level", "warn"), startProc(t, "--config", cfg, "--log-level", "warn")}

	var k keyAnswer
	if code := call(t, "POST", procs[0].admin+"/api/v1/keys", "ops-token", map[string]any{"name": "tiny", "plan": "small"}, &k); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	// A route that requires the key answers 200 only once B knows it (on
	// /open an unknown key passes too, as no key).
	waitUntil(t, "the key on B", 10*time.Second, func() bool { return status(t, procs[1].gw+"/partner/x", k.Secret) == http.StatusOK })
	// That request counted: 1 of 10. Nine more pass, then 429s; both
	// instances see uses past both thresholds.
	codes := map[int]int{}
	for i := 0; i < 13; i++ {
		codes[status(t, procs[i%2].gw+"/partner/x", k.Secret)]++
	}
	if codes[200] != 9 || codes[429] != 4 {
		t.Errorf("statuses %v, want 9 × 200 and 4 × 429", codes)
	}

	// Each instance handles each threshold once (fired or duplicate);
	// wait until all four are handled and both webhooks arrived.
	handled := func(p *proc, threshold int) (fired, dup float64) {
		_, _, body := get(t, p.admin+"/metrics")
		for _, res := range []string{"fired", "duplicate"} {
			re := regexp.MustCompile(`floodgate_quota_alarms_total\{plan="small",result="` + res + `",threshold="` + strconv.Itoa(threshold) + `"\} (\d+)`)
			if m := re.FindStringSubmatch(body); m != nil {
				v, _ := strconv.ParseFloat(m[1], 64)
				if res == "fired" {
					fired = v
				} else {
					dup = v
				}
			}
		}
		return fired, dup
	}
	waitUntil(t, "every instance to handle both thresholds", 20*time.Second, func() bool {
		for _, p := range procs {
			for _, th := range []int{80, 100} {
				if f, d := handled(p, th); f+d != 1 {
					return false
				}
			}
		}
		return true
	})
	for _, th := range []int{80, 100} {
		total := 0.0
		for _, p := range procs {
			f, _ := handled(p, th)
			total += f
		}
		if total != 1 {
			t.Errorf("threshold %d fired %v times across the instances, want 1", th, total)
		}
	}
	waitUntil(t, "two webhooks", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 2
	})
	// Deliveries are done once the webhook metrics say so on both.
	waitUntil(t, "the deliveries to be counted", 20*time.Second, func() bool {
		n := 0
		for _, p := range procs {
			_, _, body := get(t, p.admin+"/metrics")
			if m := regexp.MustCompile(`floodgate_alarm_webhooks_total\{result="delivered"\} (\d+)`).FindStringSubmatch(body); m != nil {
				v, _ := strconv.Atoi(m[1])
				n += v
			}
		}
		return n == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("%d webhooks, want 2: %+v", len(got), got)
	}
	seen := map[int]bool{}
	for _, d := range got {
		if !d.valid {
			t.Errorf("webhook %+v: bad signature", d.ev)
		}
		if d.ev.Key != "tiny" || d.ev.Plan != "small" || d.ev.Quota != 10 || d.ev.Type != "quota.threshold" || d.ev.PeriodEnd.IsZero() {
			t.Errorf("event %+v", d.ev)
		}
		if d.ev.Used*100 < int64(d.ev.Threshold)*10 {
			t.Errorf("event %+v fired below its threshold", d.ev)
		}
		seen[d.ev.Threshold] = true
	}
	if !seen[80] || !seen[100] {
		t.Errorf("thresholds %v, want 80 and 100", seen)
	}
}

package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// school starts the README's command on free ports: the school example in
// front of the demo upstream.
func school(t *testing.T, extra ...string) (gw, admin string, logs *lockedBuffer) {
	t.Helper()
	args := append([]string{"--config", filepath.Join("..", "..", "examples", "school.yaml"), "--demo",
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, extra...)
	gw, admin, _, _, logs = startServeLogged(t, args...)
	return gw, admin, logs
}

// metricsText reads /metrics.
func metricsText(t *testing.T, admin string) string {
	t.Helper()
	code, _, text := get(t, admin+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	return text
}

// TestGuessedKeysAreThrottled: a flood of guessed API keys from one
// address passes the limits that need no key, and once the unknown-key
// limit (20 a minute, bursts of 20) is used up it is answered 429, not 403.
func TestGuessedKeysAreThrottled(t *testing.T) {
	gw, admin, _ := school(t)
	counts := map[int]int{}
	var last http.Header
	for i := range 30 {
		code, hdr, _ := get(t, gw+"/partner/students/9", "x-api-key", fmt.Sprintf("guess-%d", i))
		counts[code]++
		if code == 429 {
			last = hdr
		}
	}
	if counts[403] != 20 || counts[429] != 10 {
		t.Fatalf("guessed keys: %v, want 20 × 403 then 10 × 429", counts)
	}
	if last.Get("Retry-After") == "" || !strings.Contains(last.Get("RateLimit"), `"unknown-api-key";r=0`) {
		t.Errorf("429 fields: %v", last)
	}
	text := metricsText(t, admin)
	for _, want := range []string{
		`floodgate_rejections_total{code="403",front_end="gateway",limit=""} 20`,
		`floodgate_decisions_total{front_end="gateway",limit="unknown-api-key",outcome="denied"} 10`,
		`floodgate_decisions_total{front_end="gateway",limit="per-ip-flood",outcome="allowed"} 30`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics has no %s", want)
		}
	}
	// A known key is not held back by the guesses of the same address.
	if code, _, _ := get(t, gw+"/partner/students/9", "x-api-key", "key-partner-1"); code != 200 {
		t.Errorf("a valid key after the flood: %d", code)
	}
}

// TestForgedTokenIsRefused: a forged token on a route with a per-user limit
// is answered 401, counted by reason and logged, instead of skipping the
// per-user limit as an anonymous request.
func TestForgedTokenIsRefused(t *testing.T) {
	gw, admin, logs := school(t)
	forged, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "parent-42", "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte("not the school's secret, but long enough to sign"))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		code, hdr, body := get(t, gw+"/notices/1", "Authorization", "Bearer "+forged)
		if code != 401 || !strings.Contains(body, "Unauthorized") || hdr.Get("WWW-Authenticate") == "" {
			t.Fatalf("forged token: %d %q %v", code, body, hdr)
		}
	}
	if code, _, _ := get(t, gw+"/notices/1", "Authorization", "Bearer not-a-jwt"); code != 401 {
		t.Errorf("malformed token: %d", code)
	}
	text := metricsText(t, admin)
	for _, want := range []string{
		`floodgate_invalid_tokens_total{reason="signature"} 3`,
		`floodgate_invalid_tokens_total{reason="malformed"} 1`,
		`floodgate_rejections_total{code="401",front_end="gateway",limit=""} 4`,
		`floodgate_decisions_total{front_end="gateway",limit="per-ip-flood",outcome="allowed"} 4`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if !strings.Contains(logs.String(), "invalid token") || !strings.Contains(logs.String(), "reason=signature") {
		t.Errorf("no log line for the invalid token:\n%s", logs.String())
	}
	// A request with no token at all is anonymous, as before.
	if code, _, _ := get(t, gw+"/notices/1"); code != 200 {
		t.Errorf("no token: %d", code)
	}
}

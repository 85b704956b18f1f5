package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redistest"
)

const consolePlans = `  - {name: basic, rate: 50, burst: 50, quota: {limit: 1000, period: DAY}}
  - {name: gold, rate: 100, burst: 100, quota: {limit: 100000, period: DAY}}`

type keyAnswer struct {
	Name    string `json:"name"`
	Plan    string `json:"plan"`
	State   string `json:"state"`
	Secret  string `json:"secret"`
	Quota   int64  `json:"quota"`
	Source  string `json:"source"`
	Secrets []struct {
		SHA256   string `json:"sha256"`
		NotAfter string `json:"not_after"`
	} `json:"secrets"`
}

type auditAnswer struct {
	Entries []struct {
		Actor  string         `json:"actor"`
		Action string         `json:"action"`
		Target string         `json:"target"`
		Time   time.Time      `json:"time"`
		Detail map[string]any `json:"detail"`
	} `json:"entries"`
}

// TestConsoleAPIEmbedded drives the admin API of one floodgate serve on
// the memory store: authentication, a key's whole life, the audit log,
// and the keys surviving a restart.
func TestConsoleAPIEmbedded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := consoleConfig(t, dir, "  state_file: state.bin", consolePlans)
	p := startProc(t, "--config", cfg, "--log-level", "warn")
	api := p.admin + "/api/v1"

	// Unauthenticated and wrong-token calls are refused, and so is a
	// token sent another way.
	for _, tok := range []string{"", "wrong-token", "ops-token " + "x"} {
		if code := call(t, "GET", api+"/keys", tok, nil, nil); code != http.StatusUnauthorized {
			t.Errorf("token %q: status %d, want 401", tok, code)
		}
		if code := call(t, "POST", api+"/keys", tok, map[string]any{"name": "x", "plan": "basic"}, nil); code != http.StatusUnauthorized {
			t.Errorf("create with token %q: status %d, want 401", tok, code)
		}
	}
	req, _ := http.NewRequest("GET", api+"/keys", nil)
	req.SetBasicAuth("ops", "ops-token")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("basic auth accepted: %v %v", resp, err)
	}

	var k keyAnswer
	if code := call(t, "POST", api+"/keys", "ops-token", map[string]any{"name": "acme", "plan": "basic"}, &k); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	if !strings.HasPrefix(k.Secret, "fg_") || k.State != "active" || k.Source != "api" {
		t.Fatalf("created key %+v", k)
	}
	secret := k.Secret
	if code := status(t, p.gw+"/partner/x", secret); code != http.StatusOK {
		t.Errorf("new key: %d, want 200", code)
	}
	// The secret is shown once: never in a listing or a get.
	var got keyAnswer
	call(t, "GET", api+"/keys/acme", "viewer-token", nil, &got)
	if got.Secret != "" || got.Secrets[0].SHA256 != sha256Hex(secret) {
		t.Errorf("get shows %+v", got)
	}
	if code := call(t, "POST", api+"/keys", "ops-token", map[string]any{"name": "acme", "plan": "basic"}, nil); code != http.StatusConflict {
		t.Errorf("duplicate name: %d", code)
	}
	if code := call(t, "POST", api+"/keys", "ops-token", map[string]any{"name": "x", "plan": "platinum"}, nil); code != http.StatusBadRequest {
		t.Errorf("unknown plan: %d", code)
	}

	// A larger quota for this customer, then its usage.
	if code := call(t, "PATCH", api+"/keys/acme", "ops-token", map[string]any{"quota": 5000}, &got); code != http.StatusOK || got.Quota != 5000 {
		t.Fatalf("override: %d %+v", code, got)
	}
	status(t, p.gw+"/partner/x", secret)
	var usage struct {
		Usage []struct {
			Limit    string `json:"limit"`
			Used     int64  `json:"used"`
			Capacity int64  `json:"capacity"`
		} `json:"usage"`
	}
	// The larger quota keeps what the key used: the request before it
	// and the one after.
	call(t, "GET", api+"/keys/acme/usage", "ops-token", nil, &usage)
	if len(usage.Usage) != 2 || usage.Usage[1].Limit != "basic.quota" || usage.Usage[1].Capacity != 5000 || usage.Usage[1].Used != 2 {
		t.Errorf("usage %+v", usage)
	}
	// Reading the usage charged nothing.
	call(t, "GET", api+"/keys/acme/usage", "ops-token", nil, &usage)
	if usage.Usage[1].Used != 2 {
		t.Errorf("usage after a second read: %+v", usage)
	}
	if code := call(t, "POST", api+"/keys/acme/reset", "ops-token", nil, nil); code != http.StatusOK {
		t.Errorf("reset: %d", code)
	}
	call(t, "GET", api+"/keys/acme/usage", "ops-token", nil, &usage)
	if usage.Usage[1].Used != 0 {
		t.Errorf("usage after a reset: %+v", usage)
	}

	// Rotation: both secrets work during the overlap; a rotation without
	// one ends the old secret at once.
	var rot keyAnswer
	if code := call(t, "POST", api+"/keys/acme/rotate", "ops-token", map[string]any{"overlap": "1h"}, &rot); code != http.StatusOK {
		t.Fatalf("rotate: %d", code)
	}
	if status(t, p.gw+"/partner/x", secret) != http.StatusOK || status(t, p.gw+"/partner/x", rot.Secret) != http.StatusOK {
		t.Error("a secret fails during the overlap")
	}
	var rot2 keyAnswer
	call(t, "POST", api+"/keys/acme/rotate", "ops-token", map[string]any{"overlap": "0s"}, &rot2)
	for _, old := range []string{secret, rot.Secret} {
		if code := status(t, p.gw+"/partner/x", old); code != http.StatusForbidden {
			t.Errorf("old secret after a rotation without overlap: %d, want 403", code)
		}
	}
	if code := status(t, p.gw+"/partner/x", rot2.Secret); code != http.StatusOK {
		t.Errorf("newest secret: %d", code)
	}

	// Disable, enable, and the file's keys are read-only.
	call(t, "POST", api+"/keys/acme/disable", "ops-token", nil, nil)
	if code := status(t, p.gw+"/partner/x", rot2.Secret); code != http.StatusForbidden {
		t.Errorf("disabled key: %d", code)
	}
	call(t, "POST", api+"/keys/acme/enable", "ops-token", nil, nil)
	if code := status(t, p.gw+"/partner/x", rot2.Secret); code != http.StatusOK {
		t.Errorf("enabled key: %d", code)
	}

	// Plans and limits, as compiled.
	var plans struct {
		Plans []struct {
			Name   string `json:"name"`
			Limits []struct {
				Name, Algorithm string
				Capacity        int64 `json:"capacity"`
			} `json:"limits"`
		} `json:"plans"`
	}
	call(t, "GET", api+"/plans", "viewer-token", nil, &plans)
	if len(plans.Plans) != 2 || len(plans.Plans[0].Limits) != 2 || plans.Plans[0].Limits[1].Capacity != 1000 {
		t.Errorf("plans %+v", plans)
	}

	// The keys survive a restart (the file next to the state file).
	p.stop(t)
	if _, err := filepath.Glob(filepath.Join(dir, "state.bin.keys.json")); err != nil {
		t.Fatal(err)
	}
	p2 := startProc(t, "--config", cfg, "--log-level", "warn")
	if code := status(t, p2.gw+"/partner/x", rot2.Secret); code != http.StatusOK {
		t.Errorf("key after a restart: %d", code)
	}
	call(t, "POST", p2.admin+"/api/v1/keys/acme/revoke", "ops-token", nil, nil)
	if code := status(t, p2.gw+"/partner/x", rot2.Secret); code != http.StatusForbidden {
		t.Errorf("revoked key: %d, want 403", code)
	}
	if code := call(t, "POST", p2.admin+"/api/v1/keys/acme/enable", "ops-token", nil, nil); code != http.StatusConflict {
		t.Errorf("enabling a revoked key: %d, want 409", code)
	}

	// Every change is in the audit log, newest first, with who made it.
	var audit auditAnswer
	call(t, "GET", p2.admin+"/api/v1/audit?target=acme", "viewer-token", nil, &audit)
	var actions []string
	for _, e := range audit.Entries {
		if e.Actor != "ops" || e.Time.IsZero() {
			t.Errorf("entry %+v", e)
		}
		actions = append(actions, e.Action)
	}
	want := "key.revoke key.enable key.disable key.rotate key.rotate key.reset key.update key.create"
	if got := strings.Join(actions, " "); got != want {
		t.Errorf("audit actions\n got %s\nwant %s", got, want)
	}
}

// TestConsoleAPIRedis: two floodgate serve processes share a Redis; a
// key created through one works on the other, and a revoked one stops on
// both.
func TestConsoleAPIRedis(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	cfg := consoleConfig(t, t.TempDir(), fmt.Sprintf("  store: redis://%s/0\n  store_timeout: 1s", rs.Addr), consolePlans)
	a := startProc(t, "--config", cfg, "--log-level", "warn")
	b := startProc(t, "--config", cfg, "--log-level", "warn")

	var k keyAnswer
	if code := call(t, "POST", a.admin+"/api/v1/keys", "ops-token", map[string]any{"name": "acme", "plan": "basic"}, &k); code != http.StatusCreated {
		t.Fatalf("create on A: %d", code)
	}
	if code := status(t, a.gw+"/partner/x", k.Secret); code != http.StatusOK {
		t.Errorf("new key on A: %d", code)
	}
	took := waitUntil(t, "the new key on B", 10*time.Second, func() bool { return status(t, b.gw+"/partner/x", k.Secret) == http.StatusOK })
	t.Logf("a key created on A worked on B after %v", took)

	if code := call(t, "POST", b.admin+"/api/v1/keys/acme/revoke", "ops-token", nil, nil); code != http.StatusOK {
		t.Fatalf("revoke on B: %d", code)
	}
	if code := status(t, b.gw+"/partner/x", k.Secret); code != http.StatusForbidden {
		t.Errorf("revoked key on B: %d", code)
	}
	took = waitUntil(t, "the revocation on A", 10*time.Second, func() bool { return status(t, a.gw+"/partner/x", k.Secret) == http.StatusForbidden })
	t.Logf("a key revoked on B was refused on A after %v", took)

	// Rotation with an overlap, across instances.
	var k2, rot keyAnswer
	call(t, "POST", a.admin+"/api/v1/keys", "ops-token", map[string]any{"name": "beta", "plan": "gold"}, &k2)
	call(t, "POST", b.admin+"/api/v1/keys/beta/rotate", "ops-token", map[string]any{"overlap": "1h"}, &rot)
	waitUntil(t, "the rotated secret on A", 10*time.Second, func() bool { return status(t, a.gw+"/partner/x", rot.Secret) == http.StatusOK })
	if code := status(t, a.gw+"/partner/x", k2.Secret); code != http.StatusOK {
		t.Errorf("old secret during the overlap on A: %d", code)
	}

	// One audit log for the deployment.
	var audit auditAnswer
	call(t, "GET", a.admin+"/api/v1/audit", "ops-token", nil, &audit)
	var actions []string
	for _, e := range audit.Entries {
		actions = append(actions, e.Action+" "+e.Target)
	}
	if got, want := strings.Join(actions, ", "), "key.rotate beta, key.create beta, key.revoke acme, key.create acme"; got != want {
		t.Errorf("audit: %s, want %s", got, want)
	}
}

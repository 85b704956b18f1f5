package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/keystore"
	"github.com/floodgate/floodgate/policy"
)

// replayKeysPolicy has a route that requires an API key of the one plan,
// and no key of its own: its keys are made through the admin API.
const replayKeysPolicy = `version: 1
server:
  unknown_key_limit: {rate: 1, per: 1m, burst: 1}
STORE
routes:
  - {name: partner, match: {paths: ["/partner/**"]}, upstream: none, api_key_required: true}
plans:
  - {name: gold, rate: 100, burst: 50, routes: [partner]}
`

// adminKey makes the key partner-9 in plan gold in backend, as the admin
// API does, and returns its secret.
func adminKey(t *testing.T, policyPath string, backend keystore.Backend) string {
	t.Helper()
	rl, err := policy.NewReloader(policy.ReloaderOptions{Path: policyPath})
	if err != nil {
		t.Fatal(err)
	}
	s, err := keystore.New(context.Background(), keystore.Options{Backend: backend, Policy: rl.Policy})
	if err != nil {
		t.Fatal(err)
	}
	raw, _, err := s.Create(context.Background(), "partner-9", "gold", policy.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// writeLog writes lines to a file in dir and returns its path.
func writeLog(t *testing.T, dir, name string, lines []string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// partnerLog is six requests of partner-9, allowed, as floodgate serve
// logs them (the key by its name).
func partnerLog() []string {
	var lines []string
	for i := range 6 {
		lines = append(lines, fmt.Sprintf(`{"time":"2026-11-30T10:00:0%d.000000Z","ip":"203.0.113.7","method":"GET","path":"/partner/a","status":200,"key":"partner-9","decision":"allow"}`, i))
	}
	return lines
}

// TestReplayKnowsAdminKeys: keys made through the admin API are known to
// floodgate replay, by name (Floodgate's log) and by secret (a log of the
// raw header), from the key file floodgate serve keeps beside the policy,
// from a file given with --keys, and from the Redis store; --keys none
// replays without them (each request is then an unknown key).
func TestReplayKnowsAdminKeys(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(cfg, []byte(strings.Replace(replayKeysPolicy, "STORE\n", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	// Where floodgate serve keeps the keys of this policy.
	raw := adminKey(t, cfg, keystore.NewFileBackend(filepath.Join(dir, "policy.keys.json")))
	byName := writeLog(t, dir, "access.log", partnerLog())
	csvLines := []string{"time,ip,method,path,status,api_key"}
	for i := range 6 {
		csvLines = append(csvLines, fmt.Sprintf("2026-11-30T10:00:0%dZ,203.0.113.8,GET,/partner/b,200,%s", i, raw))
	}
	bySecret := writeLog(t, dir, "raw.csv", csvLines)

	// check replays and holds the report to the key being known (every
	// request decided as logged) or not (every one an unknown key).
	check := func(name string, known bool, args ...string) {
		t.Helper()
		r, err := runReplayJSON(t, args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		unknown := int64(-1)
		for _, l := range r.Limits {
			if l.Name == policy.UnknownKeyLimitName {
				unknown = l.Seen
			}
		}
		switch {
		case r.Requests != 6:
			t.Errorf("%s: %d requests replayed, want 6", name, r.Requests)
		case known && (r.Forbidden != 0 || unknown != 0 || r.Agreement == nil || r.Agreement.Matched != 6):
			t.Errorf("%s: %d refused for their key, %d seen by the unknown-key limit, agreement %+v; want the key known", name, r.Forbidden, unknown, r.Agreement)
		case !known && unknown != 6:
			t.Errorf("%s: %d seen by the unknown-key limit, want all 6", name, unknown)
		}
	}
	check("by name", true, "--config", cfg, "--log", byName)
	check("by secret", true, "--config", cfg, "--log", bySecret)
	check("without the keys", false, "--config", cfg, "--log", byName, "--keys", "none")
	// A key file elsewhere, given with --keys.
	other := t.TempDir()
	cfg2 := filepath.Join(other, "p.yaml")
	if err := os.WriteFile(cfg2, []byte(strings.Replace(replayKeysPolicy, "STORE\n", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	check("a key file not found", false, "--config", cfg2, "--log", byName)
	check("--keys FILE", true, "--config", cfg2, "--log", byName, "--keys", filepath.Join(dir, "policy.keys.json"))
	check("--compare", true, "--config", cfg, "--compare", cfg, "--log", byName)

	// On Redis the keys are in the store.
	rs := redistest.Start(t)
	cfg3 := filepath.Join(other, "redis.yaml")
	if err := os.WriteFile(cfg3, []byte(strings.Replace(replayKeysPolicy, "STORE", "  store: redis://"+rs.Addr, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := redisconn.Open("redis://" + rs.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	adminKey(t, cfg3, keystore.NewRedisBackend(c))
	check("the Redis store", true, "--config", cfg3, "--log", byName)
	check("a Redis given with --keys", true, "--config", cfg2, "--log", byName, "--keys", "redis://"+rs.Addr)
}

// TestReplayGateNeedsRequests: a comparison that replayed nothing, or
// could not read most of its log, fails whatever --fail-above says; one
// with a few unreadable lines among many requests is judged by its flips.
func TestReplayGateNeedsRequests(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(cfg, []byte(strings.Replace(replayKeysPolicy, "STORE\n", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	good := partnerLog()
	for _, c := range []struct {
		name  string
		lines []string
		exit  int
	}{
		{"2 lines, 2 unreadable", []string{`{"time":"garbage"`, `{"nope":1}`}, 1},
		{"an empty log", nil, 1},
		{"more unreadable than read", append([]string{`{"a"`, `{"b"`, `{"c"`, `{"d"`, `{"e"`, `{"f"`, `{"g"`}, good...), 1},
		{"a few unreadable", append([]string{`{"a"`, `{"b"`}, good...), 0},
	} {
		log := writeLog(t, dir, "access.log", c.lines)
		if c.lines == nil {
			if err := os.WriteFile(log, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, args := range [][]string{
			{"--config", cfg, "--log", log, "--compare", cfg, "--keys", "none"},
			{"--config", cfg, "--log", log, "--compare", cfg, "--keys", "none", "--fail-above", "0"},
			{"--config", cfg, "--log", log, "--compare", cfg, "--keys", "none", "--fail-above", "100%"},
		} {
			_, err := runReplayJSON(t, args...)
			if exitCode(err) != c.exit {
				t.Errorf("%s, %v: exit %d (%v), want %d", c.name, args[6:], exitCode(err), err, c.exit)
			}
		}
	}
}

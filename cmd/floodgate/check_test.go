package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestCheckExample(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"check", "--config", filepath.Join("..", "..", "examples", "school.yaml")}, &out, &errOut)
	if err != nil {
		t.Fatalf("check: %v\n%s", err, errOut.String())
	}
	text := out.String()
	if !strings.Contains(text, "valid: 5 routes, 2 stages, 2 plans, 2 keys, 15 limits") {
		t.Errorf("summary missing:\n%s", text)
	}
	// Rows in evaluation order, with their numbers.
	want := []string{
		`1 +unknown-api-key +global +missing or unknown api key +client_ip +token_bucket +20 per 1m, burst 20`,
		`2 +partner-basic.rate +plan .* api_key +token_bucket +2 per 1s, burst 2 +local +no +all`,
		`3 +partner-basic.quota +plan .* quota +1000 per day \(Asia/Kolkata\)`,
		`6 +login +method +POST /login +client_ip +sliding_log +5 per 1m +deny +no +401,403`,
		`9 +stage.dev +stage +stage=dev +stage +token_bucket +5 per 1s, burst 5`,
		`11 +per-ip-flood +global +\* +client_ip +sliding_window +2000 per 5m`,
		`12 +per-ip-burst-trial .* +yes +all`,
		`15 +account +global +\* +global +token_bucket +10000 per 1s, burst 5000`,
		`partner-students +GET /partner/students/\{id\} +prod +required +http://127.0.0.1:9000`,
	}
	for _, w := range want {
		if !regexp.MustCompile(`(?m)^` + w).MatchString(text) {
			t.Errorf("no line matching %q in:\n%s", w, text)
		}
	}
}

func TestCheckInvalid(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(path, []byte("limits:\n  - name: a\n    rate: 5\n    brust: 3\n  - name: a\n    rate: x\n"), 0o644)
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"check", "--config", path}, &out, &errOut)
	if code := exitCode(err); code != 1 {
		t.Fatalf("exit %d (%v), want 1", code, err)
	}
	want := path + ":4:5: limits[0].brust: unknown field (did you mean \"burst\"?)\n" +
		path + ":5:11: limits[1].name: duplicate name \"a\" (also limits[0])\n" +
		path + ":6:11: limits[1].rate: want a whole number, got \"x\""
	if err.Error() != want {
		t.Errorf("problems\n got %s\nwant %s", err, want)
	}
	if out.Len() != 0 {
		t.Errorf("printed a table for an invalid file:\n%s", out.String())
	}
}

func TestCheckUsage(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	for _, args := range [][]string{{"check"}, {"check", "--nope"}, {"check", "a.yaml", "b.yaml"}} {
		if code := exitCode(run(context.Background(), args, &out, &errOut)); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	err := run(context.Background(), []string{"check", filepath.Join(t.TempDir(), "missing.yaml")}, &out, &errOut)
	if code := exitCode(err); code != 1 {
		t.Errorf("missing file: exit %d (%v)", code, err)
	}
}

// TestCheckRefusesMetadataWebhook: a plan's alarm webhook at a cloud
// metadata address fails the check unless the plan allows link-local
// targets.
func TestCheckRefusesMetadataWebhook(t *testing.T) {
	t.Parallel()
	policy := func(allow string) string {
		return `
routes: [{name: r, match: {paths: ["/**"]}, upstream: none}]
plans:
  - name: basic
    quota: {limit: 10, period: DAY}
    alarms: {webhook: "http://169.254.169.254/latest/meta-data/", secret_file: hook.secret` + allow + `}
`
	}
	var out, errOut bytes.Buffer
	path := writeConfig(t, policy(""))
	err := run(context.Background(), []string{"check", "--config", path}, &out, &errOut)
	if code := exitCode(err); code != 1 || !strings.Contains(err.Error(), "plans[0].alarms.webhook:") ||
		!strings.Contains(err.Error(), "169.254.169.254 is a link-local address") {
		t.Fatalf("exit %d (%v), want 1 naming the webhook", code, err)
	}
	out.Reset()
	path = writeConfig(t, policy(", allow_link_local: true"))
	if err := os.WriteFile(filepath.Join(filepath.Dir(path), "hook.secret"), []byte("hook-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"check", "--config", path}, &out, &errOut); err != nil {
		t.Fatalf("allowed: %v", err)
	}
}

// TestCheckReadsRLSConfig: the descriptor files a policy's
// server.rls_config names fail the check as they would stop serve: a
// descriptor's problem at its own position, a path that cannot be read at
// its entry of the policy; good ones pass.
func TestCheckReadsRLSConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, src string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := write("rls/bad/a.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 3}\n")
	write("rls/good/a.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n")
	policyWith := func(name, paths string) string {
		return write(name, "version: 1\nserver:\n  grpc_listen: 127.0.0.1:0\n  rls_config: "+paths+"\n")
	}
	check := func(path string) (int, string) {
		var out, errOut bytes.Buffer
		err := run(context.Background(), []string{"check", "--config", path}, &out, &errOut)
		if err != nil {
			return exitCode(err), err.Error()
		}
		return 0, out.String()
	}
	p := policyWith("bad.yaml", `["rls/bad", "does/not/exist"]`)
	code, msg := check(p)
	want := p + ":4:27: server.rls_config[1]: " + filepath.Join(dir, "does/not/exist") + ": cannot read: no such file or directory\n" +
		bad + `:4:24: descriptors[0].rate_limit.unit: unknown unit "fortnight"`
	if code != 1 || !strings.HasPrefix(msg, want) {
		t.Errorf("bad descriptors: exit %d\n%s\nwant exit 1 and\n%s", code, msg, want)
	}
	if code, msg := check(policyWith("good.yaml", `["rls/good"]`)); code != 0 || !strings.Contains(msg, "valid") {
		t.Errorf("good descriptors: exit %d\n%s", code, msg)
	}
}

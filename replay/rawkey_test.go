package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/policy"
)

// TestRawKeysNeverShown attacks the reports of a log that holds API keys
// themselves (a CSV's api_key column, an NGINX log of $http_x_api_key): a
// key is hashed as a request's and named as the gateway names it (a known
// key by its name, another by "?" and its hash prefix), never shown. A
// known key and guessed ones are refused and flip under a stricter plan;
// the text, HTML and JSON reports, the differences from the logged
// decisions, the flipped requests and the unreadable lines (a bad status
// after the key) are searched for every raw key.
func TestRawKeysNeverShown(t *testing.T) {
	t.Parallel()
	const known = "raw-secret-of-k1"
	policyText := fmt.Sprintf(`
server:
  api_key_header: x-api-key
  unknown_key_limit: {algorithm: sliding_log, limit: 1, window: 1h}
routes:
  - {name: partner, match: {paths: ["/partner/**"]}, upstream: none, api_key_required: true}
plans:
  - {name: basic, rate: 1, per: 1h, burst: BURST, routes: [partner]}
keys:
  - {name: k1, plan: basic, sha256: %s}
`, config.HashKey(known))
	pa := compilePolicy(t, strings.Replace(policyText, "BURST", "3", 1))
	pb := compilePolicy(t, strings.Replace(policyText, "BURST", "2", 1))
	raws := []string{known}
	for i := range 3 {
		raws = append(raws, fmt.Sprintf("guessed-secret-%d", i))
	}
	dir := t.TempDir()
	csvLines := []string{"time,ip,method,path,status,api_key"}
	const nginxFormat = NginxCombined + ` $request_time $msec "$http_x_api_key"`
	var nginxLines []string
	n := 0
	add := func(ip, raw string, status any) {
		at := t0.Add(time.Duration(n) * time.Millisecond)
		n++
		csvLines = append(csvLines, fmt.Sprintf("%s,%s,GET,/partner/a,%v,%s", at.Format(time.RFC3339Nano), ip, status, raw))
		nginxLines = append(nginxLines, fmt.Sprintf(`%s - - [%s] "GET /partner/a HTTP/1.1" %v 2 "-" "curl/8" 0.000 %d.%03d "%s"`,
			ip, at.Format("02/Jan/2006:15:04:05 -0700"), status, at.Unix(), at.Nanosecond()/1e6, raw))
	}
	for range 4 { // the fourth refused by the plan, the third flips
		add("198.51.100.1", known, 200)
	}
	for _, raw := range raws[1:] { // each guess twice: the second refused
		add("198.51.100.2", raw, 403)
		add("198.51.100.2", raw, 403)
	}
	for _, raw := range raws { // unreadable: a status that is not a number
		add("198.51.100.3", raw, "x")
	}
	logs := map[string]Options{
		"csv":   {Logs: []string{filepath.Join(dir, "keys.csv")}},
		"nginx": {Logs: []string{filepath.Join(dir, "access.log")}, Format: "nginx", LogFormat: nginxFormat},
	}
	for name, lines := range map[string][]string{"csv": csvLines, "nginx": nginxLines} {
		if err := os.WriteFile(logs[name].Logs[0], []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, o := range logs {
		var flips bytes.Buffer
		o.Policy, o.Compare, o.PolicyName, o.CompareName = pa, pb, "a.yaml", "b.yaml"
		o.OnFlip = func(f *Flip) { json.NewEncoder(&flips).Encode(f) }
		r := mustRun(t, o)
		if r.Requests != 10 || r.Logs[0].Skipped != 4 || r.Compare == nil || r.Compare.Flips == 0 || len(r.TopKeys) < 2 ||
			r.Agreement == nil || len(r.Agreement.Mismatches) == 0 {
			t.Fatalf("%s: %d requests, %d unreadable, comparison %+v, keys %+v, agreement %+v: the log does not try what it should",
				name, r.Requests, r.Logs[0].Skipped, r.Compare, r.TopKeys, r.Agreement)
		}
		var text, page, js bytes.Buffer
		if err := r.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		if err := r.WriteHTML(&page); err != nil {
			t.Fatal(err)
		}
		if err := json.NewEncoder(&js).Encode(r); err != nil {
			t.Fatal(err)
		}
		outputs := map[string]string{"text": text.String(), "HTML": page.String(), "JSON": js.String(), "flips": flips.String()}
		for out, s := range outputs {
			for _, raw := range raws {
				if strings.Contains(s, raw) {
					t.Errorf("%s: the %s report shows the key %q:\n%s", name, out, raw, s)
				}
			}
		}
		// The keys are shown as the gateway names them.
		if s := text.String(); !strings.Contains(s, "k1") || !strings.Contains(s, "?") {
			t.Errorf("%s: the text report names no key:\n%s", name, s)
		}
	}
}

// TestTrailingFieldsNeverShown: a log whose lines carry more fields than
// its format names (an NGINX log_format that adds $http_authorization or
// $http_x_api_key after the combined fields, replayed as combined) is
// unreadable, and the report says so without showing what follows the
// fields it knows: credentials, in such a log.
func TestTrailingFieldsNeverShown(t *testing.T) {
	t.Parallel()
	pol := compilePolicy(t, `
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: wide, algorithm: fixed_window, limit: 100, window: 1h}
`)
	secrets := []string{"Bearer eyJhbGciOiJIUzI1NiJ9.s3cret-claims.s3cret-sig", "raw-api-key-s3cret"}
	var lines []string
	for i, s := range secrets {
		at := t0.Add(time.Duration(i) * time.Second)
		lines = append(lines, fmt.Sprintf(`198.51.100.1 - - [%s] "GET /a HTTP/1.1" 200 2 "-" "curl/8" "%s"`,
			at.Format("02/Jan/2006:15:04:05 -0700"), s))
	}
	unreadableNeverShown(t, pol, lines, "what follows the known fields", "at the end")
}

// TestBadRequestLineQueryNeverShown: a log line whose request line has no
// space (a client that sent a bare target, as scanners do) is unreadable,
// and the report says so showing the line up to its query, never the
// query, which may hold a credential (?api_key=...).
func TestBadRequestLineQueryNeverShown(t *testing.T) {
	t.Parallel()
	pol := compilePolicy(t, `
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: wide, algorithm: fixed_window, limit: 100, window: 1h}
`)
	var lines []string
	for i, req := range []string{"/x?api_key=s3cret-one", "GET/x?token=s3cret-two"} {
		at := t0.Add(time.Duration(i) * time.Second)
		lines = append(lines, fmt.Sprintf(`198.51.100.1 - - [%s] "%s" 400 2 "-" "curl/8"`,
			at.Format("02/Jan/2006:15:04:05 -0700"), req))
	}
	unreadableNeverShown(t, pol, lines, "a request line's query", "bad request line")
}

// writeReports returns r's text, HTML and JSON reports, by their names.
func writeReports(t *testing.T, r *Report) map[string]string {
	t.Helper()
	var text, page, js bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	if err := json.NewEncoder(&js).Encode(r); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"text": text.String(), "HTML": page.String(), "JSON": js.String()}
}

// writeLines writes lines to a log file of their own and returns its path.
func writeLines(t *testing.T, lines []string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// unreadableNeverShown replays lines, each unreadable as NGINX's combined
// format, through pol, and fails the test unless every one is counted
// unreadable, no report shows any of their "s3cret" text (what it would
// be showing), and the text report says why (its words).
func unreadableNeverShown(t *testing.T, pol *policy.Policy, lines []string, what, why string) {
	t.Helper()
	r := mustRun(t, Options{Logs: []string{writeLines(t, lines)}, Format: "nginx", LogFormat: NginxCombined, Policy: pol})
	if r.Logs[0].Skipped != int64(len(lines)) {
		t.Fatalf("%d unreadable lines, want %d", r.Logs[0].Skipped, len(lines))
	}
	reports := writeReports(t, r)
	for out, s := range reports {
		if strings.Contains(s, "s3cret") {
			t.Errorf("the %s report shows %s:\n%s", out, what, s)
		}
	}
	if !strings.Contains(reports["text"], why) {
		t.Errorf("the text report does not say why the lines are unreadable:\n%s", reports["text"])
	}
}

package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/access"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/keystore"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// noEngine is an engine the tests never ask.
type noEngine struct{ limiter.Engine }

// testAPI is the real API over a policy of two limits and a plan, a key
// file, an audit file and access lists in t.TempDir(), behind an httptest
// server; the token is "ops-token".
type testAPI struct {
	url    string
	audit  *FileAudit
	access *access.Lists
}

func newTestAPI(t *testing.T) *testAPI {
	t.Helper()
	return newTestAPIWith(t, `server:
  access:
    deny: [203.0.113.0/24]
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 2}
  - {name: everyone, key: global, rate: 1, per: 1h, burst: 1000}
plans:
  - {name: basic, rate: 1, per: 1h, burst: 3}
`)
}

// newTestAPIWith is newTestAPI over the policy file src.
func newTestAPIWith(t *testing.T, src string) *testAPI {
	t.Helper()
	f, err := config.Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	pol := func() *policy.Policy { return p }
	dir := t.TempDir()
	keys, err := keystore.New(context.Background(), keystore.Options{Backend: keystore.NewFileBackend(filepath.Join(dir, "keys.json")), Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	ta := &testAPI{audit: NewFileAudit(filepath.Join(dir, "audit.jsonl"), 0), access: access.New(&f.Server.Access, nil, 0, nil)}
	t.Cleanup(ta.access.Close)
	a, err := New(Options{Tokens: []Token{{Name: "ops", SHA256: sha256.Sum256([]byte("ops-token"))}}, Keys: keys,
		Audit: ta.audit, Policy: pol, Engine: noEngine{}, Access: ta.access})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	ta.url = srv.URL
	return ta
}

// do sends body (raw JSON) with the token and returns the status and the
// error message, if any.
func (ta *testAPI) do(t *testing.T, method, path, body string, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, ta.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	if req.Header == nil {
		req.Header = http.Header{"Authorization": {"Bearer ops-token"}}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var e struct{ Error string }
	_ = json.NewDecoder(res.Body).Decode(&e)
	return res.StatusCode, e.Error
}

// TestAccessExemptValidated: the API checks an entry's exempt list with
// the policy file's rules: an allow entry's is [all] alone or names limits
// that exist, each once (so never longer than the limits are many); a deny
// entry takes none. A refused entry is answered 400 with the reason and
// nothing is stored.
func TestAccessExemptValidated(t *testing.T) {
	ta := newTestAPI(t)
	huge, _ := json.Marshal(make([]string, 100000))
	for name, body := range map[string]string{
		"all twice":        `{"list":"allow","network":"10.0.0.1","exempt":["all","all"]}`,
		"all and a limit":  `{"list":"allow","network":"10.0.0.1","exempt":["per-ip","all"]}`,
		"a limit twice":    `{"list":"allow","network":"10.0.0.1","exempt":["per-ip","everyone","per-ip"]}`,
		"unknown":          `{"list":"allow","network":"10.0.0.1","exempt":["nope"]}`,
		"empty names":      `{"list":"allow","network":"10.0.0.1","exempt":` + string(huge) + `}`,
		"long name":        `{"list":"allow","network":"10.0.0.1","exempt":["` + strings.Repeat("<", 200000) + `"]}`,
		"none":             `{"list":"allow","network":"10.0.0.1","exempt":[]}`,
		"deny with exempt": `{"list":"deny","network":"198.18.7.7","exempt":["<"]}`,
		"deny with all":    `{"list":"deny","network":"198.18.7.7","exempt":["all"]}`,
		"deny with many":   `{"list":"deny","network":"198.18.7.7","exempt":` + string(huge) + `}`,
	} {
		st, msg := ta.do(t, "POST", "/api/v1/access", body, nil)
		if st != http.StatusBadRequest || msg == "" || len(msg) > 300 {
			t.Errorf("%s: %d %.300q, want a 400 with a short reason", name, st, msg)
		}
	}
	if es := ta.access.List().Entries(); len(es) != 1 {
		t.Fatalf("refused entries were stored: %+v", es)
	}
	if all, _ := ta.audit.List(context.Background(), Query{}); len(all) != 0 {
		t.Errorf("refused entries were audited: %+v", all)
	}
	for name, body := range map[string]string{
		"all":    `{"list":"allow","network":"10.0.0.1","exempt":["all"]}`,
		"limits": `{"list":"allow","network":"10.0.0.2","exempt":["per-ip","everyone","basic.rate"]}`,
		"deny":   `{"list":"deny","network":"198.18.7.7"}`,
	} {
		if st, msg := ta.do(t, "POST", "/api/v1/access", body, nil); st != http.StatusOK {
			t.Errorf("%s: %d %s, want 200", name, st, msg)
		}
	}
	if es := ta.access.List().Entries(); len(es) != 4 {
		t.Errorf("%d entries, want 4: %+v", len(es), es)
	}
}

// TestCheckExemptSharedWithFile: the policy file refuses what the API
// refuses, at the same place.
func TestCheckExemptSharedWithFile(t *testing.T) {
	_, err := config.Parse("p.yaml", []byte(`server:
  access:
    allow: [{networks: [10.0.0.0/8], exempt: [per-ip, per-ip]}, {networks: [10.1.0.0/16], exempt: [all, all]}]
limits:
  - {name: per-ip, rate: 1, per: 1h, burst: 2}
`))
	for _, want := range []string{`server.access.allow[0].exempt[1]: limit "per-ip" is named twice`,
		"server.access.allow[1].exempt[0]: all stands alone"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
}

// TestAuditHugeEntryReadable: an entry however large is written bounded
// (its long details replaced by their size and digest), so it and every
// later one read back; a line that cannot be read (one written before
// entries were bounded, a damaged one) is skipped and counted, never hides
// later lines, and compaction keeps it as it is rather than dropping what
// it could not read.
func TestAuditHugeEntryReadable(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	// A line as the old code wrote it for a huge exempt list: 1.2 MB.
	old, _ := json.Marshal(Entry{Time: t0, Actor: "ops", Action: "access.add", Target: "deny|198.18.7.7/32",
		Detail: map[string]any{"exempt": []string{strings.Repeat("<", 200000)}}})
	if len(old) < 1<<20 {
		t.Fatalf("the old line is %d bytes", len(old))
	}
	if err := os.WriteFile(path, append(append(old, '\n'), "{damaged\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	a := NewFileAudit(path, 10)
	if err := a.Append(ctx, Entry{Time: t0, Actor: strings.Repeat("a", 100000), Action: "access.add", Target: "allow|10.0.0.1/32",
		Detail: map[string]any{"exempt": []string{strings.Repeat("<", 200000)}, "list": "allow"}}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		if err := a.Append(ctx, Entry{Time: t0.Add(time.Duration(i) * time.Second), Actor: "ops", Action: "key.create", Target: fmt.Sprint("k", i)}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := a.List(ctx, Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 6 || all[0].Target != "k5" || all[4].Target != "k1" || a.Unreadable() != 2 {
		t.Fatalf("read %d entries (%d lines skipped): %+v", len(all), a.Unreadable(), all)
	}
	big := all[5]
	if big.Target != "allow|10.0.0.1/32" || big.Detail["list"] != "allow" || !strings.Contains(big.Actor, "truncated") {
		t.Errorf("the bounded entry %+v", big)
	}
	if ex, _ := big.Detail["exempt"].(map[string]any); ex["truncated"] != true || ex["sha256"] == "" {
		t.Errorf("the long detail %+v", big.Detail["exempt"])
	}
	data, _ := os.ReadFile(path)
	for i, l := range bytes.Split(data, []byte{'\n'})[2:] {
		if len(l) > MaxEntryBytes {
			t.Errorf("line %d is %d bytes", i+2, len(l))
		}
	}

	// 20 lines on disk make a compaction to the newest 10: every one
	// of them is kept, the unreadable old line among them.
	for i := 6; i <= 17; i++ {
		if err := a.Append(ctx, Entry{Time: t0.Add(time.Duration(i) * time.Second), Actor: "ops", Action: "key.revoke", Target: fmt.Sprint("k", i)}); err != nil {
			t.Fatal(err)
		}
	}
	data, _ = os.ReadFile(path)
	if n := bytes.Count(data, []byte{'\n'}); n != 10 {
		t.Fatalf("%d lines after compaction, want 10", n)
	}
	all, _ = NewFileAudit(path, 10).List(ctx, Query{})
	if len(all) != 10 || all[0].Target != "k17" || all[9].Target != "k8" {
		t.Errorf("after compaction: %d entries, %+v", len(all), all)
	}
}

// TestAuditCompactionKeepsUnreadable: compaction keeps the newest lines as
// they are, a line it cannot read among them, and only drops the oldest.
func TestAuditCompactionKeepsUnreadable(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	a := NewFileAudit(path, 4)
	add := func(i int) {
		t.Helper()
		if err := a.Append(ctx, Entry{Time: t0.Add(time.Duration(i) * time.Second), Actor: "ops", Action: "key.revoke", Target: fmt.Sprint("k", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		add(i)
	}
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"time":` + strings.Repeat("9", 2<<20) + "}\n")
	f.Close()
	a = NewFileAudit(path, 4)
	for i := 4; i < 7; i++ {
		add(i) // the 8th line compacts
	}
	data, _ := os.ReadFile(path)
	lines := bytes.Split(bytes.TrimSuffix(data, []byte{'\n'}), []byte{'\n'})
	if len(lines) != 4 || len(lines[0]) < 2<<20 {
		t.Fatalf("%d lines after compaction, first %d bytes", len(lines), len(lines[0]))
	}
	all, _ := a.List(ctx, Query{})
	if len(all) != 3 || all[0].Target != "k6" || all[2].Target != "k4" || a.Unreadable() != 1 {
		t.Errorf("%d entries, %d skipped: %+v", len(all), a.Unreadable(), all)
	}
}

// TestAdminRequestHardening: a key's override the plan's limit cannot take
// is a 400 with the reason, not a 500; data after a body's object is
// refused; the Bearer scheme is matched in any case, and a request with
// two Authorization headers is refused.
func TestAdminRequestHardening(t *testing.T) {
	ta := newTestAPI(t)
	if st, msg := ta.do(t, "POST", "/api/v1/keys", `{"name":"acme","plan":"basic"}`, nil); st != http.StatusCreated {
		t.Fatalf("create: %d %s", st, msg)
	}
	for name, c := range map[string]struct{ method, path, body string }{
		"huge rate":       {"PATCH", "/api/v1/keys/acme", `{"rate":9223372036854775807}`},
		"huge burst":      {"PATCH", "/api/v1/keys/acme", `{"burst":9223372036854775807}`},
		"create huge":     {"POST", "/api/v1/keys", `{"name":"big","plan":"basic","rate":9223372036854775807}`},
		"trailing":        {"PATCH", "/api/v1/keys/acme", `{"rate":5} {"rate":6}`},
		"trailing junk":   {"POST", "/api/v1/access", `{"list":"deny","network":"198.18.0.1"}x`},
		"rotate trailing": {"POST", "/api/v1/keys/acme/rotate", `{"overlap":"1s"}{}`},
		"rotate forever":  {"POST", "/api/v1/keys/acme/rotate", `{"overlap":"2562047h"}`},
		"rotate past max": {"POST", "/api/v1/keys/acme/rotate", `{"overlap":"721h"}`},
	} {
		if st, msg := ta.do(t, c.method, c.path, c.body, nil); st != http.StatusBadRequest || msg == "" {
			t.Errorf("%s: %d %q, want a 400 with a reason", name, st, msg)
		}
	}
	if st, msg := ta.do(t, "PATCH", "/api/v1/keys/acme", `{"rate":5}`+"\n", nil); st != http.StatusOK {
		t.Errorf("PATCH: %d %s", st, msg)
	}
	for h, want := range map[string]int{
		"bearer ops-token":  200,
		"BEARER  ops-token": 200,
		"Bearer ops-token":  200,
		"Bearerops-token":   401,
		"Basic ops-token":   401,
		"Bearer ":           401,
	} {
		if st, _ := ta.do(t, "GET", "/api/v1/keys", "", http.Header{"Authorization": {h}}); st != want {
			t.Errorf("Authorization: %q: %d, want %d", h, st, want)
		}
	}
	for _, hs := range [][]string{{"Bearer ops-token", "Bearer other"}, {"Bearer other", "Bearer ops-token"}, {"Bearer ops-token", "Bearer ops-token"}} {
		if st, _ := ta.do(t, "GET", "/api/v1/keys", "", http.Header{"Authorization": hs}); st != http.StatusUnauthorized {
			t.Errorf("Authorization: %q: %d, want 401", hs, st)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/policy"
)

const explainTestPolicy = `version: 1
server:
  user:
    jwt: {alg: HS256, key_file: secret.txt, claim: sub}
  admin:
    tokens: [{name: ops, sha256: ADMIN}]
routes:
  - {name: students, match: {methods: [GET], paths: ["/students/{id}"]}, stage: dev, upstream: UPSTREAM}
  - {name: partner, match: {methods: [GET], paths: ["/partner/**"]}, stage: prod, api_key_required: true, upstream: UPSTREAM}
  - {name: login, match: {methods: [POST], paths: ["/login"]}, stage: prod, upstream: UPSTREAM}
  - {name: api, match: {hosts: [api.example.com], paths: ["/v2/**"]}, upstream: UPSTREAM}
stages:
  - {name: dev, rate: 1, per: 1h, burst: 3}
  - {name: prod, rate: 100}
plans:
  - {name: basic, rate: 2, routes: [partner]}
  - {name: gold, rate: 20}
keys:
  - {name: k1, plan: basic, sha256: K1}
  - {name: k2, plan: gold, sha256: K2}
limits:
  - {name: login, algorithm: sliding_log, limit: 5, window: 1m, match: {methods: [POST], paths: ["/login"]}, key: client_ip, count_on: [401], scope: method}
  - {name: per-user, rate: 5, match: {routes: [login, students]}, key: user}
  - {name: per-tenant, rate: 5, match: {stages: [prod]}, key: "header:X-Tenant", scope: stage}
  - {name: v2, rate: 5, match: {hosts: [api.example.com], paths: ["/v2/**"]}, key: client_ip}
  - {name: per-ip-trial, rate: 1, per: 1h, burst: 1, key: client_ip, shadow: true, scope: global}
account: {rate: 1000}
`

const explainSecret = "explain-test-secret-of-enough-length"

// hs256 signs a token for sub with the test secret.
func hs256(sub string, exp time.Time) string {
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	body := enc.EncodeToString([]byte(fmt.Sprintf(`{"sub":%q,"exp":%d}`, sub, exp.Unix())))
	mac := hmac.New(sha256.New, []byte(explainSecret))
	mac.Write([]byte(head + "." + body))
	return head + "." + body + "." + enc.EncodeToString(mac.Sum(nil))
}

func writeExplainPolicy(t *testing.T, upstream string) string {
	t.Helper()
	dir := t.TempDir()
	s := strings.ReplaceAll(explainTestPolicy, "UPSTREAM", upstream)
	s = strings.Replace(s, "sha256: K1", "sha256: "+config.HashKey("raw-1"), 1)
	s = strings.Replace(s, "sha256: K2", "sha256: "+config.HashKey("raw-2"), 1)
	s = strings.Replace(s, "sha256: ADMIN", "sha256: "+sha256Hex(explainAdminToken), 1)
	if err := os.WriteFile(filepath.Join(dir, "secret.txt"), []byte(explainSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// explainCLI runs floodgate explain --json with the request's fields as
// flags.
func explainCLI(t *testing.T, cfg string, er gateway.ExplainRequest) *gateway.Explanation {
	t.Helper()
	args := []string{"explain", "--json", "--config", cfg, "--method", er.Method, "--path", er.Path, "--ip", er.IP}
	if er.Host != "" {
		args = append(args, "--host", er.Host)
	}
	if er.KeyName != "" {
		args = append(args, "--key-name", er.KeyName)
	}
	for k, v := range er.Headers {
		args = append(args, "--header", k+": "+v)
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("explain %v: %v\n%s", args, err, errb.String())
	}
	var e gateway.Explanation
	if err := json.Unmarshal(out.Bytes(), &e); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	return &e
}

// explainAdminToken is the admin token of writeExplainPolicy's file.
const explainAdminToken = "explain-admin-token"

// postExplain posts body to a running floodgate serve's /v1/explain with
// the admin token.
func postExplain(t *testing.T, admin, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", admin+"/v1/explain", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+explainAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// explainHTTP asks a running floodgate serve.
func explainHTTP(t *testing.T, admin string, er gateway.ExplainRequest) *gateway.Explanation {
	t.Helper()
	body, _ := json.Marshal(er)
	resp := postExplain(t, admin, string(body))
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST /v1/explain %s: %d", body, resp.StatusCode)
	}
	var e gateway.Explanation
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	return &e
}

type wantLimit struct {
	name    string
	matched bool
	reason  string // a substring
	key     string
	missing string
}

func checkExplanation(t *testing.T, via string, e *gateway.Explanation, want []wantLimit) {
	t.Helper()
	if len(e.Limits) != 11 {
		t.Fatalf("%s: %d limits, want all 11 of the policy (the unknown-key limit included)", via, len(e.Limits))
	}
	for _, w := range want {
		var got *gateway.LimitExplanation
		for i := range e.Limits {
			if e.Limits[i].Name == w.name {
				got = &e.Limits[i]
			}
		}
		if got == nil {
			t.Fatalf("%s: no limit %s", via, w.name)
		}
		if got.Matched != w.matched || !strings.Contains(got.Reason, w.reason) || got.CounterKey != w.key || got.Missing != w.missing {
			t.Errorf("%s: %s: matched=%v key=%q missing=%q reason %q\n  want matched=%v key=%q missing=%q reason ~%q",
				via, w.name, got.Matched, got.CounterKey, got.Missing, got.Reason, w.matched, w.key, w.missing, w.reason)
		}
		if got.Matched != (got.State != nil) {
			t.Errorf("%s: %s: matched=%v with state %v", via, w.name, got.Matched, got.State)
		}
	}
}

// TestExplainReasons explains a request for every reason a limit applies
// or not, through the CLI and through a running server's endpoint: both
// say the same.
func TestExplainReasons(t *testing.T) {
	up := replayUpstream(t)
	cfg := writeExplainPolicy(t, up.URL)
	_, admin, _, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	ip := "198.51.100.4"
	token := hs256("ana", time.Now().Add(time.Hour))
	for _, tc := range []struct {
		name      string
		req       gateway.ExplainRequest
		forbidden string
		status    int // 0: forwarded
		userError bool
		want      []wantLimit
	}{
		{"route, stage, shadow and account", gateway.ExplainRequest{Method: "GET", Path: "/students/9", IP: ip}, "", 0, false, []wantLimit{
			{"basic.rate", false, "no API key", "", "api_key"},
			{"login", false, "method GET is not POST", "", ""},
			{"per-user", false, "has no user", "", "user"},
			{"v2", false, "has no host", "", ""},
			{"per-tenant", false, `stage "dev" is not prod`, "", ""},
			{"stage.dev", true, `on stage "dev"`, "stage:dev", ""},
			{"stage.prod", false, `on stage "dev"`, "", ""},
			{"per-ip-trial", true, "shadow: counted, never blocks", "ip:" + ip, ""},
			{"account", true, "every request", "global", ""},
		}},
		{"method, user from a token, header key, count_on", gateway.ExplainRequest{Method: "POST", Path: "/login", IP: ip,
			Headers: map[string]string{"Authorization": "Bearer " + token, "X-Tenant": "t1"}}, "", 0, false, []wantLimit{
			{"login", true, "charged after the response when its status is one of [401]", "ip:" + ip, ""},
			{"per-user", true, "route=login,students", "user:ana", ""},
			{"per-tenant", true, "stage=prod", "h:X-Tenant=t1", ""},
			{"stage.prod", true, "", "stage:prod", ""},
		}},
		{"a token that does not verify, a missing header", gateway.ExplainRequest{Method: "POST", Path: "/login", IP: ip,
			Headers: map[string]string{"Authorization": "Bearer " + token + "x"}}, "", 401, true, []wantLimit{
			{"per-user", false, "has no user", "", "user"},
			{"per-tenant", false, "no X-Tenant header", "", "header:X-Tenant"},
		}},
		{"no API key on a route that needs one", gateway.ExplainRequest{Method: "GET", Path: "/partner/x", IP: ip}, "has none", 403, false, []wantLimit{
			{"basic.rate", false, "not checked", "", ""},
			{policy.UnknownKeyLimitName, true, "refused for its API key", "ip:" + ip, ""},
			{"account", true, "every request", "global", ""},
		}},
		{"an unknown API key", gateway.ExplainRequest{Method: "GET", Path: "/partner/x", IP: ip, Headers: map[string]string{"X-Api-Key": "nope"}},
			"is not configured", 403, false, nil},
		{"the key's plan", gateway.ExplainRequest{Method: "GET", Path: "/partner/x", IP: ip, Headers: map[string]string{"X-Api-Key": "raw-1"}}, "", 0, false, []wantLimit{
			{"basic.rate", true, `key "k1" is in plan "basic"`, "key:k1", ""},
			{"gold.rate", false, `key "k1" is in plan "basic"`, "", ""},
		}},
		{"a plan that does not cover the route", gateway.ExplainRequest{Method: "GET", Path: "/students/1", IP: ip, Headers: map[string]string{"X-Api-Key": "raw-1"}}, "", 0, false, []wantLimit{
			{"basic.rate", false, `plan "basic" does not cover route "students"`, "", ""},
		}},
		{"no route", gateway.ExplainRequest{Method: "GET", Path: "/nowhere", IP: ip, Headers: map[string]string{"X-Api-Key": "raw-1"}}, "", 404, false, []wantLimit{
			{"basic.rate", false, "no route matched", "", ""},
			{"per-user", false, "no route matched (the limit is for route login or students)", "", ""},
			{"per-tenant", false, "no stage", "", ""},
		}},
		{"a key by its name, the wrong host", gateway.ExplainRequest{Method: "GET", Host: "www.example.com", Path: "/v2/a", IP: ip, KeyName: "k2"}, "", 404, false, []wantLimit{
			{"gold.rate", true, "", "key:k2", ""},
			{"v2", false, `host "www.example.com" is not api.example.com`, "", ""},
		}},
		{"host and path", gateway.ExplainRequest{Method: "GET", Host: "api.example.com", Path: "/v2/a", IP: ip}, "", 0, false, []wantLimit{
			{"v2", true, "host=api.example.com /v2/**", "ip:" + ip, ""},
		}},
		{"the path", gateway.ExplainRequest{Method: "GET", Host: "api.example.com", Path: "/v1/a", IP: ip}, "", 404, false, []wantLimit{
			{"v2", false, `path "/v1/a" does not match /v2/**`, "", ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for via, e := range map[string]*gateway.Explanation{"cli": explainCLI(t, cfg, tc.req), "endpoint": explainHTTP(t, admin, tc.req)} {
				checkExplanation(t, via, e, tc.want)
				if tc.forbidden == "" && e.Forbidden != "" || !strings.Contains(e.Forbidden, tc.forbidden) {
					t.Errorf("%s: forbidden %q, want ~%q", via, e.Forbidden, tc.forbidden)
				}
				if e.Answer.Status != tc.status || e.Answer.Forwarded != (tc.status == 0) {
					t.Errorf("%s: answer %+v, want status %d", via, e.Answer, tc.status)
				}
				if (e.UserError != "") != tc.userError {
					t.Errorf("%s: user error %q", via, e.UserError)
				}
			}
		})
	}
}

// TestExplainBinding: on a running server, the explanation peeks at the
// live state: the limit that would refuse binds, a shadow limit that
// would refuse does not, the answer is the 429 the client then gets, and
// explaining charges nothing.
func TestExplainBinding(t *testing.T) {
	up := replayUpstream(t)
	cfg := writeExplainPolicy(t, up.URL)
	gw, admin, _, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	er := gateway.ExplainRequest{Method: "GET", Path: "/students/9", IP: "127.0.0.1"}
	for i := range 3 {
		e := explainHTTP(t, admin, er)
		if !e.Answer.Forwarded || e.Binding != "stage.dev" {
			t.Fatalf("before request %d: %+v", i, e)
		}
		// Explaining twice changes nothing.
		if again := explainHTTP(t, admin, er); limitState(t, again, "stage.dev").Remaining != limitState(t, e, "stage.dev").Remaining {
			t.Fatal("an explanation charged the limit")
		}
		if code, _, _ := get(t, gw+"/students/9"); code != 200 {
			t.Fatalf("request %d: %d", i, code)
		}
	}
	e := explainHTTP(t, admin, er)
	st := limitState(t, e, "stage.dev")
	if e.Binding != "stage.dev" || st.Allowed || st.RetryAfter <= 0 || e.Answer.Status != 429 || e.Answer.Forwarded ||
		!strings.Contains(e.Answer.Body, "Too Many Requests") {
		t.Errorf("after the burst: binding %q state %+v answer %+v", e.Binding, st, e.Answer)
	}
	if sh := limitState(t, e, "per-ip-trial"); sh.Allowed {
		t.Errorf("the shadow limit would allow: %+v", sh)
	}
	for _, l := range e.Limits {
		if l.Name == "per-ip-trial" && l.Binding {
			t.Error("a shadow limit binds")
		}
	}
	code, h, _ := get(t, gw+"/students/9")
	if code != 429 || h.Get("Retry-After") == "" {
		t.Errorf("the request the explanation refused got %d", code)
	}
	// A bad request is a 400 with a message.
	for _, body := range []string{`{"path":"nope"}`, `{"path":"/x","ip":"not-an-ip"}`, `{"path":"/x","extra":1}`, `{} {}`} {
		resp := postExplain(t, admin, body)
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("%s: %d", body, resp.StatusCode)
		}
	}
}

func limitState(t *testing.T, e *gateway.Explanation, name string) *gateway.LimitState {
	t.Helper()
	for _, l := range e.Limits {
		if l.Name == name {
			if l.State == nil {
				t.Fatalf("%s has no state", name)
			}
			return l.State
		}
	}
	t.Fatalf("no limit %s", name)
	return nil
}

// TestExplainText: the CLI's table and answer, and its errors.
func TestExplainText(t *testing.T) {
	cfg := writeExplainPolicy(t, "http://127.0.0.1:9")
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"explain", "--config", cfg, "--path", "/partner/x", "--key", "raw-1", "--ip", "2001:db8::5"}, &out, &errb); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	for _, want := range []string{"GET /partner/x from 2001:db8::5 (counted as 2001:db8::/64)", "API key k1 (plan basic)",
		"basic.rate (binding)", "would allow: 1 of 2 left after it", "answer: forwarded to the upstream", "RateLimit: ", "(nothing was charged)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "raw-1") {
		t.Error("the raw key is printed")
	}
	for _, args := range [][]string{{"explain", "--config", cfg}, {"explain", "--path", "/x"}, {"explain", "--config", cfg, "--path", "x"},
		{"explain", "--config", cfg, "--path", "/x", "--ip", "nope"}, {"explain", "--config", cfg, "--path", "/x", "--header", "novalue"}} {
		if err := run(context.Background(), args, &out, &errb); exitCode(err) != 2 {
			t.Errorf("%v: %v (exit %d), want a usage error", args, err, exitCode(err))
		}
	}
}

// TestExplainTakesAdminToken: with admin tokens in the file, the endpoint
// takes one, as the admin API does (an explanation tells valid API keys
// from unknown ones).
func TestExplainTakesAdminToken(t *testing.T) {
	cfg := consoleConfig(t, t.TempDir(), "", "  - {name: basic, rate: 5}")
	_, admin, _, _ := startServe(t, "--config", cfg, "--log-level", "error")
	body := `{"path":"/partner/x","headers":{"X-Api-Key":"guess"}}`
	for _, c := range []struct {
		token string
		want  int
	}{{"", 401}, {"wrong", 401}, {"viewer-token", 200}, {"ops-token", 200}} {
		req, _ := http.NewRequest("POST", admin+"/v1/explain", strings.NewReader(body))
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("token %q: %d, want %d", c.token, resp.StatusCode, c.want)
		}
	}
}

// TestExplainCLIMethodOverride: floodgate explain decides a request with a
// method override header as the gateway of the same policy does, under
// server.method_override honor (the limit of the named method applies)
// and reject (400).
func TestExplainCLIMethodOverride(t *testing.T) {
	up := replayUpstream(t)
	for _, mode := range []string{"honor", "reject"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "mo.yaml")
			body := fmt.Sprintf(`version: 1
server:
  method_override: %s
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
limits:
  - {name: posts, rate: 1, per: 1h, burst: 1, key: client_ip, match: {methods: [POST]}, scope: global}
`, mode, up.URL)
			if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if err := run(context.Background(), []string{"explain", "--config", cfg, "--path", "/x", "--json",
				"--header", "X-HTTP-Method-Override: POST"}, &out, &errb); err != nil {
				t.Fatalf("%v\n%s", err, errb.String())
			}
			var e gateway.Explanation
			if err := json.Unmarshal(out.Bytes(), &e); err != nil {
				t.Fatal(err)
			}
			gw, _, _, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
			code, _, _ := get(t, gw+"/x", "X-HTTP-Method-Override", "POST")
			switch mode {
			case "honor":
				if code != 200 {
					t.Fatalf("gateway: first request %d", code)
				}
				if code, _, _ := get(t, gw+"/x", "X-HTTP-Method-Override", "POST"); code != 429 {
					t.Fatalf("gateway: the second request under the POST limit got %d", code)
				}
				if e.Binding != "posts" || !e.Answer.Forwarded {
					t.Errorf("explain: binding %q answer %+v; the gateway counts the request under posts", e.Binding, e.Answer)
				}
			case "reject":
				if code != 400 {
					t.Fatalf("gateway: %d", code)
				}
				if e.Answer.Status != 400 || e.Answer.Forwarded {
					t.Errorf("explain: answer %+v; the gateway answers 400", e.Answer)
				}
			}
		})
	}
}

// TestExplainRepeatedKeyedHeader: a request carrying a field a limit
// counts by twice is refused 400 by the gateway; POST /v1/explain (the
// field under two spellings of its name) and floodgate explain (the
// --header flag repeated) give the same answer, not a count under one of
// the two lines.
func TestExplainRepeatedKeyedHeader(t *testing.T) {
	up := replayUpstream(t)
	cfg := writeExplainPolicy(t, up.URL)
	gw, admin, _, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	req, _ := http.NewRequest("POST", gw+"/login", nil)
	req.Header["X-Tenant"] = []string{"a", "b"}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("gateway: %d", resp.StatusCode)
	}
	for i := range 4 { // a map's order must not decide
		r := postExplain(t, admin, `{"method":"POST","path":"/login","headers":{"X-Tenant":"a","x-tenant":"b"}}`)
		var e gateway.Explanation
		err := json.NewDecoder(r.Body).Decode(&e)
		r.Body.Close()
		if err != nil || r.StatusCode != 200 {
			t.Fatalf("POST /v1/explain: %d %v", r.StatusCode, err)
		}
		if e.Answer.Status != 400 || e.Answer.Forwarded {
			t.Fatalf("POST /v1/explain %d: answer %+v, binding %q; the gateway answers 400", i, e.Answer, e.Binding)
		}
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"explain", "--json", "--config", cfg, "--method", "POST", "--path", "/login",
		"--header", "X-Tenant: a", "--header", "X-Tenant: b"}, &out, &errb); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	var e gateway.Explanation
	if err := json.Unmarshal(out.Bytes(), &e); err != nil {
		t.Fatal(err)
	}
	if e.Answer.Status != 400 || e.Answer.Forwarded {
		t.Errorf("floodgate explain: answer %+v, binding %q; the gateway answers 400", e.Answer, e.Binding)
	}
}

// TestExplainCLIReadsThePathAsServe: floodgate explain gives the reason a
// header-keyed limit does not apply to a path with an escaped slash as
// floodgate serve reads it under server.escaped_slash: segment and a
// case-insensitive match: the header is missing, as the second request
// that carries it, limited by serve, shows.
func TestExplainCLIReadsThePathAsServe(t *testing.T) {
	up := replayUpstream(t)
	cfg := filepath.Join(t.TempDir(), "paths.yaml")
	body := fmt.Sprintf(`version: 1
server: {escaped_slash: segment, path_matching: case_insensitive}
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: %s}
limits:
  - {name: tenant, rate: 1, per: 1h, burst: 1, key: "header:X-Tenant", match: {paths: ["/files/{id}"]}}
`, up.URL)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	const path = "/Files/a%2Fb"
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"explain", "--config", cfg, "--path", path, "--json"}, &out, &errb); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	var e gateway.Explanation
	if err := json.Unmarshal(out.Bytes(), &e); err != nil {
		t.Fatal(err)
	}
	gw, _, _, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	var codes []int
	for range 2 {
		code, _, _ := get(t, gw+path, "X-Tenant", "t1")
		codes = append(codes, code)
	}
	if codes[0] != 200 || codes[1] != 429 {
		t.Fatalf("serve: %s with X-Tenant got %v, want the tenant limit to apply", path, codes)
	}
	for _, l := range e.Limits {
		if l.Name == "tenant" && (l.Matched || l.Missing != "header:X-Tenant" || !strings.Contains(l.Reason, "no X-Tenant header")) {
			t.Errorf("explain: %s without X-Tenant: %+v; serve limits it once the header is there", path, l)
		}
	}
}

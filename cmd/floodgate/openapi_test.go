package main

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// The dashboard's page is text/html, which openapi3filter reads as text
// once told to.
func init() { openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.FileBodyDecoder) }

// loadSpec loads and validates one of docs/openapi's descriptions.
func loadSpec(t *testing.T, name string) (*openapi3.T, routers.Router) {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromFile(filepath.Join("..", "..", "docs", "openapi", name))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("%s is not a valid OpenAPI description: %v", name, err)
	}
	doc.Servers = nil // the tests' servers are on free ports
	r, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return doc, r
}

// specOps lists a description's operations as "METHOD /path".
func specOps(doc *openapi3.T) []string {
	var out []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, method+" "+path)
		}
	}
	sort.Strings(out)
	return out
}

// registeredRoutes reads the routes the servers register from their
// source: the method patterns ("GET /api/v1/keys/{name}") given to a mux
// in the non-test files of dirs, and the paths httpapi's ServeHTTP
// switches on (every one POST).
func registeredRoutes(t *testing.T, dirs ...string) []string {
	t.Helper()
	pattern := regexp.MustCompile(`^(GET|HEAD|POST|PUT|PATCH|DELETE) (/\S*)$`)
	seen := map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		files, _ := filepath.Glob(filepath.Join("..", "..", dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.BasicLit:
					if s, err := strconv.Unquote(n.Value); err == nil && n.Kind == token.STRING && pattern.MatchString(s) {
						seen[s] = true
					}
				case *ast.CaseClause:
					if dir != "httpapi" {
						return true
					}
					for _, e := range n.List {
						if lit, ok := e.(*ast.BasicLit); ok {
							if s, err := strconv.Unquote(lit.Value); err == nil && strings.HasPrefix(s, "/v1/") {
								seen["POST "+s] = true
							}
						}
					}
				}
				return true
			})
		}
	}
	var out []string
	for r := range seen {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPIDescribesEveryRoute: every route the admin listener and the
// check API register is in docs/openapi (admin.yaml, check.yaml), and
// every operation there is registered.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	for _, c := range []struct {
		spec string
		dirs []string
	}{
		{"admin.yaml", []string{"admin", "dashboard", "internal/app", "internal/console"}},
		{"check.yaml", []string{"httpapi"}},
	} {
		doc, _ := loadSpec(t, c.spec)
		inSpec := map[string]bool{}
		for _, op := range specOps(doc) {
			inSpec[op] = true
		}
		registered := registeredRoutes(t, c.dirs...)
		if len(registered) < 4 {
			t.Fatalf("%v: found only %v: the source scan is broken", c.dirs, registered)
		}
		for _, r := range registered {
			if !inSpec[r] {
				t.Errorf("%s: %s is registered but not described", c.spec, r)
			}
			delete(inSpec, r)
		}
		for op := range inSpec {
			t.Errorf("%s: %s is described but no server registers it", c.spec, op)
		}
	}
}

// specClient sends requests and validates each request and answer
// against a description with kin-openapi, and records which operations
// were answered.
type specClient struct {
	t      *testing.T
	name   string
	doc    *openapi3.T
	router routers.Router
	mu     sync.Mutex
	hits   map[string]bool // operations answered by their handler
}

func newSpecClient(t *testing.T, spec string) *specClient {
	doc, r := loadSpec(t, spec)
	return &specClient{t: t, name: spec, doc: doc, router: r, hits: map[string]bool{}}
}

// do sends method url with body (JSON, or none when "") and the bearer
// token (none when ""); an invalid request (the test sends some on
// purpose) is validated only for its answer. It returns the status and
// the body.
func (c *specClient) do(method, url, token, body string, invalid bool) (int, string) {
	t := c.t
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		t.Fatalf("%s: %s %s is not described: %v", c.name, method, url, err)
	}
	// The router takes "/ui/" for "/ui"; the description has both.
	if p := req.URL.Path; route.Path != p {
		if item := c.doc.Paths.Value(p); item != nil && item.GetOperation(method) != nil {
			route = &routers.Route{Spec: c.doc, Path: p, PathItem: item, Method: method, Operation: item.GetOperation(method)}
		}
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if !invalid {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			t.Errorf("%s: the request %s %s does not fit the description: %v", c.name, method, url, err)
		}
		if body != "" {
			req.Body = io.NopCloser(strings.NewReader(body))
		}
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body: io.NopCloser(bytes.NewReader(raw)), Options: &openapi3filter.Options{IncludeResponseStatus: true}}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s: the answer to %s %s (%d %.200q) does not fit the description: %v", c.name, method, url, resp.StatusCode, raw, err)
	}
	// The mux's own 404 and 405, and the APIs' catch-alls, are not the
	// route's handler.
	if s := string(raw); !strings.Contains(s, "404 page not found") && !strings.Contains(s, "Method Not Allowed") &&
		!strings.Contains(s, "no such endpoint") {
		c.mu.Lock()
		c.hits[strings.ToUpper(route.Method)+" "+route.Path] = true
		c.mu.Unlock()
	}
	return resp.StatusCode, string(raw)
}

// served fails for every operation of the description no call reached.
func (c *specClient) served() {
	doc, _ := loadSpec(c.t, c.name)
	for _, op := range specOps(doc) {
		if !c.hits[op] {
			c.t.Errorf("%s: %s was never answered by a handler", c.name, op)
		}
	}
}

// TestOpenAPIAnswersFitTheDescription drives every operation of the admin
// listener and of the check API on a running floodgate serve, successes
// and refusals, and validates each request and each answer against
// docs/openapi with kin-openapi (openapi3filter); every described
// operation must have been answered by its handler.
func TestOpenAPIAnswersFitTheDescription(t *testing.T) {
	cfg := writeConfig(t, fmt.Sprintf(`version: 1
server:
  api_listen: 127.0.0.1:0
  api_auth: none
  admin:
    tokens: [{name: ops, sha256: %q}]
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: none, api_key_required: true}
limits:
  - {name: calls, rate: 1, per: 1h, burst: 2, key: client_ip}
  - {name: tokens, algorithm: fixed_window, limit: 1000, window: 1h, key: api_key}
plans:
  - {name: basic, rate: 5, quota: {limit: 100, period: DAY}}
`, sha256Hex("ops-token")))
	_, admin, _, out := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	m := regexp.MustCompile(`check API on (http://\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no check API:\n%s", out.String())
	}
	api := m[1]

	a := newSpecClient(t, "admin.yaml")
	const tok = "ops-token"
	expect := func(what string, got, want int, body string) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %d, want %d: %.200s", what, got, want, body)
		}
	}
	for _, p := range []string{"/healthz", "/readyz", "/readyz?strict", "/metrics", "/ui/"} {
		code, body := a.do("GET", admin+p, "", "", false)
		expect("GET "+p, code, 200, body)
	}
	code, body := a.do("GET", admin+"/ui", "", "", false)
	expect("GET /ui", code, 301, body)
	for _, p := range []string{"/ui/api/overview", "/ui/api/quotas", "/api/v1/keys", "/api/v1/plans", "/api/v1/limits", "/api/v1/audit?limit=10"} {
		code, body = a.do("GET", admin+p, tok, "", false)
		expect("GET "+p, code, 200, body)
		code, body = a.do("GET", admin+p, "", "", false)
		expect("GET "+p+" without a token", code, 401, body)
	}
	code, body = a.do("POST", admin+"/v1/explain", tok, `{"method":"GET","path":"/x"}`, false)
	expect("POST /v1/explain", code, 200, body)
	code, body = a.do("POST", admin+"/v1/explain", "", `{"path":"/x"}`, false)
	expect("POST /v1/explain without a token", code, 401, body)
	code, body = a.do("POST", admin+"/api/v1/keys", tok, `{"name":"k1","plan":"basic"}`, false)
	expect("POST /api/v1/keys", code, 201, body)
	code, body = a.do("POST", admin+"/api/v1/keys", tok, `{"name":"k2"}`, false)
	expect("POST /api/v1/keys without a plan", code, 400, body)
	code, body = a.do("GET", admin+"/api/v1/keys/k1", tok, "", false)
	expect("GET /api/v1/keys/k1", code, 200, body)
	code, body = a.do("GET", admin+"/api/v1/keys/nobody", tok, "", false)
	expect("GET /api/v1/keys/nobody", code, 404, body)
	code, body = a.do("PATCH", admin+"/api/v1/keys/k1", tok, `{"rate":3}`, false)
	expect("PATCH /api/v1/keys/k1", code, 200, body)
	code, body = a.do("POST", admin+"/api/v1/keys/k1/rotate", tok, `{"overlap":"1h"}`, false)
	expect("POST rotate", code, 200, body)
	for _, action := range []string{"disable", "enable", "reset"} {
		code, body = a.do("POST", admin+"/api/v1/keys/k1/"+action, tok, "", false)
		expect("POST "+action, code, 200, body)
	}
	code, body = a.do("GET", admin+"/api/v1/keys/k1/usage", tok, "", false)
	expect("GET usage of k1", code, 200, body)
	code, body = a.do("GET", admin+"/api/v1/usage?limit=calls&key=127.0.0.1", tok, "", false)
	expect("GET /api/v1/usage", code, 200, body)
	code, body = a.do("GET", admin+"/api/v1/bans", tok, "", false)
	expect("GET /api/v1/bans", code, 200, body)
	code, body = a.do("DELETE", admin+"/api/v1/bans?ban=logins&key=127.0.0.1", tok, "", false)
	expect("DELETE /api/v1/bans of a key not banned", code, 404, body)
	code, body = a.do("DELETE", admin+"/api/v1/bans", tok, "", true)
	expect("DELETE /api/v1/bans without its parameters", code, 400, body)
	code, body = a.do("POST", admin+"/api/v1/access", tok, `{"list":"deny","network":"192.0.2.0/24"}`, false)
	expect("POST /api/v1/access", code, 200, body)
	code, body = a.do("POST", admin+"/api/v1/access", tok, `{"list":"deny","network":"192.0.2.1/24"}`, false)
	expect("POST /api/v1/access with host bits", code, 400, body)
	code, body = a.do("GET", admin+"/api/v1/access", tok, "", false)
	expect("GET /api/v1/access", code, 200, body)
	code, body = a.do("DELETE", admin+"/api/v1/access?list=deny&network=192.0.2.0/24", tok, "", false)
	expect("DELETE /api/v1/access", code, 200, body)
	code, body = a.do("DELETE", admin+"/api/v1/access?list=deny&network=192.0.2.0/24", tok, "", false)
	expect("DELETE /api/v1/access again", code, 404, body)
	code, body = a.do("GET", admin+"/api/v1/usage?limit=nothing&key=x", tok, "", false)
	expect("GET /api/v1/usage of no limit", code, 404, body)
	code, body = a.do("DELETE", admin+"/api/v1/keys/k1", tok, "", false)
	expect("DELETE a key not revoked", code, 409, body)
	code, body = a.do("POST", admin+"/api/v1/keys/k1/revoke", tok, "", false)
	expect("POST revoke", code, 200, body)
	code, body = a.do("DELETE", admin+"/api/v1/keys/k1", tok, "", false)
	expect("DELETE a revoked key", code, 200, body)
	a.served()

	c := newSpecClient(t, "check.yaml")
	for i, want := range []int{200, 200, 429} {
		code, body = c.do("POST", api+"/v1/check", "", `{"limit":"calls","key":"a"}`, false)
		expect(fmt.Sprintf("check %d", i+1), code, want, body)
	}
	code, body = c.do("POST", api+"/v1/peek", "", `{"hits":[{"limit":"calls","key":"b","cost":1}]}`, false)
	expect("peek", code, 200, body)
	code, body = c.do("POST", api+"/v1/check", "", `{"limit":"nothing"}`, false)
	expect("check of no limit", code, 404, body)
	code, body = c.do("POST", api+"/v1/check", "", `{"limit":"calls","cost":0}`, true)
	expect("check of cost 0", code, 400, body)
	code, body = c.do("POST", api+"/v1/check", "", `{"limit":"calls","cost":5}`, false)
	expect("check of a cost that never fits", code, 422, body)
	code, body = c.do("POST", api+"/v1/reserve", "", `{"hits":[{"limit":"tokens","key":"k","cost":100}],"ttl":60}`, false)
	expect("reserve", code, 200, body)
	tokm := regexp.MustCompile(`"reservation":\s*"([^"]+)"`).FindStringSubmatch(body)
	if tokm == nil {
		t.Fatalf("reserve answered no reservation: %s", body)
	}
	settle := fmt.Sprintf(`{"reservation":%q,"actual":40}`, tokm[1])
	code, body = c.do("POST", api+"/v1/settle", "", settle, false)
	expect("settle", code, 200, body)
	code, body = c.do("POST", api+"/v1/settle", "", settle, false)
	expect("the same settle again", code, 200, body)
	code, body = c.do("POST", api+"/v1/settle", "", fmt.Sprintf(`{"reservation":%q,"actual":41}`, tokm[1]), false)
	expect("another settle of a settled reservation", code, 404, body)
	code, body = c.do("POST", api+"/v1/reserve", "", `{"limit":"tokens","key":"k2","cost":10,"ttl":60}`, false)
	expect("reserve of one hit", code, 200, body)
	c.served()
}

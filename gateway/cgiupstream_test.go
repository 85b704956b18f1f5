package gateway

import (
	"fmt"
	"net/http"
	"net/http/cgi"
	"os"
	"testing"
)

// cgiChild is the environment variable that makes this test binary a CGI
// program (serveCGIChild, from TestMain) for an upstream served through
// net/http/cgi.
const cgiChild = "FLOODGATE_TEST_CGI_CHILD"

// serveCGIChild is the CGI program of cgiUpstream: it answers the user the
// request names in X-Floodgate-User and X-User, its X-Forwarded-For and
// the tenant it names in X-Tenant, as a CGI program reads them
// (HTTP_X_FLOODGATE_USER, HTTP_X_USER, HTTP_X_FORWARDED_FOR,
// HTTP_X_TENANT), and exits.
func serveCGIChild() {
	err := cgi.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "identity=%q user=%q for=%q tenant=%q", os.Getenv("HTTP_X_FLOODGATE_USER"), os.Getenv("HTTP_X_USER"),
			os.Getenv("HTTP_X_FORWARDED_FOR"), os.Getenv("HTTP_X_TENANT"))
	}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// cgiUpstream is an upstream that runs this test binary as a CGI program
// (RFC 3875): a request field reaches it as HTTP_ and its name in upper
// case with each '-' written '_', so X_User and X-User are one variable.
func cgiUpstream() http.Handler {
	return &cgi.Handler{Path: os.Args[0], Args: []string{"-test.run=^$"}, Env: []string{cgiChild + "=1"}}
}

// TestUnderscoreSpellingsNeverReachTheUpstream: a field spelled with '_'
// for '-' is the same field to an upstream that reads its request as CGI
// variables do (PHP, WSGI and CGI programs): a client's X_Floodgate_User
// or X_User is removed as its X-Floodgate-User and X-User are, or refused,
// so that the upstream is never told a user the client chose; and so is
// its X_Forwarded_For, an address it chose.
func TestUnderscoreSpellingsNeverReachTheUpstream(t *testing.T) {
	src := `
server:
  trusted_proxies: ["10.0.0.0/8"]
  user: {header: X-User}
  upstream:
    identity_headers: {user: X-Floodgate-User}
routes:
  - {name: api, match: {paths: ["/**"]}, upstream: "http://127.0.0.1:1"}
limits:
  - {name: per-user, rate: 1, per: 1h, burst: 50, key: user}
`
	forFronts(t, proxyFronts, func(t *testing.T, front string) {
		pm, err := NewPolicyMatcher(Fixed(compilePolicy(t, "cgi.yaml", src)), PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, base, c := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t)}, cgiUpstream().ServeHTTP)
		for _, hdr := range []map[string]string{
			{"X-Floodgate-User": "admin", "X-User": "admin"},
			{"X_Floodgate_User": "admin"},
			{"X_User": "admin"},
			{"x_user": "admin"},
			{"X-Floodgate_User": "admin"},
			// Beside the gateway's own X-Forwarded-For the CGI host
			// keeps one of the two, whichever its map gives last: a few
			// tries see the client's.
			{"X_Forwarded_For": "6.6.6.6"}, {"X_Forwarded_For": "6.6.6.6"},
			{"X_Forwarded_For": "6.6.6.6"}, {"X_Forwarded_For": "6.6.6.6"},
		} {
			a := do(t, c, "GET", base+"/x", hdr)
			if a.status == http.StatusBadRequest {
				continue // refused: nothing reached the upstream
			}
			if a.status != 200 || a.body != `identity="" user="" for="127.0.0.1" tenant=""` {
				t.Errorf("%v: status %d, the upstream read %s", hdr, a.status, a.body)
			}
		}
	})
}

// TestUnderscoreSpellingOfAKeyedFieldRefused: to an upstream that reads
// its request as CGI variables do, X_Tenant is X-Tenant, so a field a
// limit counts by spelled with '_' for '-' is a second copy of it, which
// the upstream may serve where the gateway charged the first, or the only
// one, which the gateway charged nothing: a limit of one request an hour
// per X-Tenant spent by tenant acme, acme's requests spelled X_Tenant,
// alone and beside another tenant's X-Tenant, are refused 400 and reach
// no upstream, as are those of a field an overload tenant and tier are
// read from.
func TestUnderscoreSpellingOfAKeyedFieldRefused(t *testing.T) {
	src := `
routes:
  - name: api
    match: {paths: ["/**"]}
    upstream: "http://127.0.0.1:1"
    overload: {limit: 100, tenant: "header:X-Org", tier_header: X-Priority}
limits:
  - {name: per-tenant, rate: 1, per: 1h, burst: 1, key: "header:X-Tenant"}
`
	forFronts(t, proxyFronts, func(t *testing.T, front string) {
		pm, err := NewPolicyMatcher(Fixed(compilePolicy(t, "cgi.yaml", src)), PolicyMatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, base, c := startFront(t, front, Options{Matcher: pm, Engine: memEngine(t)}, cgiUpstream().ServeHTTP)
		if a := do(t, c, "GET", base+"/x", map[string]string{"X-Tenant": "acme"}); a.status != 200 || a.body != `identity="" user="" for="127.0.0.1" tenant="acme"` {
			t.Fatalf("acme's one request: %d %s", a.status, a.body)
		}
		for _, hdr := range []map[string]string{
			{"X_Tenant": "acme"},
			{"x_tenant": "acme"},
			{"X-Tenant": "other", "X_Tenant": "acme"},
			{"X_Org": "acme"},
			{"X_Priority": "critical"},
		} {
			if a := do(t, c, "GET", base+"/x", hdr); a.status != http.StatusBadRequest {
				t.Errorf("%v: status %d, the upstream read %s; want 400", hdr, a.status, a.body)
			}
		}
	})
}

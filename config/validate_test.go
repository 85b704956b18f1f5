package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestListenAddresses: what a listener can open passes; what only fails
// when floodgate serve opens it is reported by the file, with a position.
func TestListenAddresses(t *testing.T) {
	for _, addr := range []string{":8080", ":0", "127.0.0.1:9090", "0.0.0.0:80", "[::1]:8080", "[::]:443",
		"[fe80::1%eth0]:80", "localhost:8080", "api.example.com:443", "gw-1.internal.:8080"} {
		if _, err := Parse("l.yaml", []byte("server:\n  api_auth: none\n  api_listen: \""+addr+"\"\n")); err != nil {
			t.Errorf("%s refused: %v", addr, err)
		}
	}
	for addr, want := range map[string]string{
		"8080":            `"8080" is not a host:port address`,
		":99999":          `the port must be a number from 0 to 65535, got "99999"`,
		":-1":             `the port must be a number from 0 to 65535, got "-1"`,
		":+80":            `the port must be a number from 0 to 65535, got "+80"`,
		"localhost:http":  `the port must be a number from 0 to 65535, got "http"`,
		"300.1.1.1:80":    `"300.1.1.1" is neither an IP address nor a host name`,
		"my host:80":      `"my host" is neither an IP address nor a host name`,
		"-bad.example:80": `"-bad.example" is neither an IP address nor a host name`,
		"a..b:80":         `"a..b" is neither an IP address nor a host name`,
	} {
		_, err := Parse("l.yaml", []byte("server:\n  api_listen: \""+addr+"\"\n"))
		if err == nil || !strings.HasPrefix(err.Error(), "l.yaml:2:15: server.api_listen: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want l.yaml:2:15: server.api_listen: ... %s", addr, err, want)
		}
	}
}

// TestRouteUpstream: a route forwards to a URL or says it has none.
func TestRouteUpstream(t *testing.T) {
	f, err := Parse("r.yaml", []byte(`
routes:
  - {name: fwd, match: {paths: ["/a"]}, upstream: "https://api.internal:8443/base"}
  - {name: check-only, match: {paths: ["/b"]}, upstream: none}
`))
	if err != nil {
		t.Fatal(err)
	}
	if u := f.Routes[0].UpstreamURL; u == nil || u.Host != "api.internal:8443" {
		t.Errorf("fwd upstream %v", u)
	}
	if f.Routes[1].UpstreamURL != nil || f.Routes[1].Upstream != NoUpstream {
		t.Errorf("check-only upstream %v", f.Routes[1].UpstreamURL)
	}
	_, err = Parse("r.yaml", []byte("routes:\n  - {name: forgot, match: {paths: [\"/c\"]}}\n"))
	if err == nil || err.Error() != "r.yaml:2:5: routes[0].upstream: a route needs an upstream: an http:// or https:// URL, or none if the gateway is not to forward it" {
		t.Errorf("route without upstream: %v", err)
	}
}

// TestReservedLimitNames: a limit may not take the name of a limit the
// policy makes itself; the problem is placed at the name, not found later
// as a duplicate without a position.
func TestReservedLimitNames(t *testing.T) {
	for name, want := range map[string]string{
		"account":         `r.yaml:3:11: limits[0].name: the name "account" is reserved for the account limit`,
		"unknown-api-key": `r.yaml:3:11: limits[0].name: the name "unknown-api-key" is reserved for the limit of requests with a missing or unknown API key`,
	} {
		_, err := Parse("r.yaml", []byte("version: 1\nlimits:\n  - name: "+name+"\n    rate: 5\n    burst: 5\n"))
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("a limit named %s: %v\nwant %s", name, err, want)
		}
	}
}

// TestDocumentedJWTRules: the package documentation and
// examples/README.md state the token rules, and loading a file enforces
// them, with a position.
func TestDocumentedJWTRules(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "examples", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"doc.go": string(doc), "examples/README.md": string(readme)} {
		text = strings.Join(strings.Fields(strings.ReplaceAll(text, "//", "")), " ")
		for _, rule := range []string{"at least 32 bytes", "at least 2048 bits", "P-256", "exp"} {
			if !strings.Contains(text, rule) {
				t.Errorf("%s does not state %q", name, rule)
			}
		}
	}
	dir := t.TempDir()
	src := []byte("server:\n  user:\n    jwt: {alg: HS256, key_file: secret.txt}\n")
	for _, n := range []int{31, 32} {
		if err := os.WriteFile(filepath.Join(dir, "secret.txt"), []byte(strings.Repeat("s", n)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Parse(filepath.Join(dir, "f.yaml"), src)
		switch {
		case n == 32 && err != nil:
			t.Errorf("a 32-byte secret refused: %v", err)
		case n == 31 && (err == nil || !strings.Contains(err.Error(), "f.yaml:3:33: server.user.jwt.key_file: jwt HS256 secret is 31 bytes; use at least 32")):
			t.Errorf("a 31-byte secret: %v", err)
		}
	}
}

// TestEscapedSlash: server.escaped_slash is both unless the file says
// segment, decoded or reject; another word is refused at its position.
func TestEscapedSlash(t *testing.T) {
	f, err := Parse("e.yaml", []byte("limits:\n  - {name: a, rate: 7}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if f.Server.EscapedSlash != EscapedSlashBoth {
		t.Errorf("default %q, want %q", f.Server.EscapedSlash, EscapedSlashBoth)
	}
	for _, w := range []string{EscapedSlashBoth, EscapedSlashSegment, EscapedSlashDecoded, EscapedSlashReject} {
		if f, err := Parse("e.yaml", []byte("server:\n  escaped_slash: "+w+"\n")); err != nil || f.Server.EscapedSlash != w {
			t.Errorf("%s: %v", w, err)
		}
	}
	_, err = Parse("e.yaml", []byte("server:\n  path_matching: exact\n  escaped_slash: keep\n"))
	const want = `e.yaml:3:18: server.escaped_slash: escaped_slash must be both, segment, decoded or reject, got "keep"`
	if err == nil || err.Error() != want {
		t.Errorf("a wrong word: %v, want %s", err, want)
	}
}

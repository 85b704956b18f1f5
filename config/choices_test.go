package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestChoicesAreWhatValidationAccepts writes every word of every field of
// Choices in a file and wants it accepted, and a word that is none of
// them refused at the field with a message listing them.
func TestChoicesAreWhatValidationAccepts(t *testing.T) {
	secret, err := filepath.Abs(filepath.Join("..", "examples", "demo-jwt-secret.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// files write the word W at the field, which the error names.
	files := map[string]struct{ src, field string }{
		"server.path_matching":     {"server:\n  path_matching: W\n", "server.path_matching"},
		"server.format_suffix":     {"server:\n  format_suffix: W\n", "server.format_suffix"},
		"server.escaped_slash":     {"server:\n  escaped_slash: W\n", "server.escaped_slash"},
		"server.method_override":   {"server:\n  method_override: W\n", "server.method_override"},
		"server.engine":            {"server:\n  engine: W\n", "server.engine"},
		"server.redis_eviction":    {"server:\n  redis_eviction: W\n", "server.redis_eviction"},
		"server.memory.soft_limit": {"server:\n  memory: {soft_limit: W}\n", "server.memory.soft_limit"},
		"server.api_auth":          {"server:\n  api_auth: W\n", "server.api_auth"},
		"server.access_log.format": {"server:\n  access_log: {format: W}\n", "server.access_log.format"},
		"server.user.jwt.alg": {"server:\n  user:\n    jwt: {alg: W, key_file: " + secret + "}\n",
			"server.user.jwt.alg"},
		"routes[].on_invalid_token": {"routes:\n  - {name: r, upstream: none, on_invalid_token: W}\n",
			"routes[0].on_invalid_token"},
		"routes[].grpc_stream": {"routes:\n  - {name: r, upstream: none, grpc_stream: W}\n",
			"routes[0].grpc_stream"},
		"routes[].balance": {"routes:\n  - {name: r, upstreams: [\"http://a\"], balance: W}\n", "routes[0].balance"},
		"server.tls.client_auth": {"server:\n  tls: {certs: [{cert: /no/cert, key: /no/key}], client_ca: /no/ca, client_auth: W}\n",
			"server.tls.client_auth"},
		"server.tls.min_version": {"server:\n  tls: {certs: [{cert: /no/cert, key: /no/key}], min_version: W}\n",
			"server.tls.min_version"},
		"limits[].scope": {"limits:\n  - {name: l, rate: 5, scope: W}\n", "limits[0].scope"},
		"limits[].key":   {"limits:\n  - {name: l, rate: 5, key: W}\n", "limits[0].key"},
		"server.bans[].key": {"server:\n  bans:\n    - {name: b, key: W, after: 3, within: 1m, ban: 1m}\n",
			"server.bans[0].key"},
	}
	for _, path := range ChoicePaths() {
		f, ok := files[path]
		if !ok {
			t.Errorf("%s: no file writes it; add one", path)
			continue
		}
		words := Choices(path)
		if len(words) == 0 {
			t.Errorf("%s: no choices", path)
		}
		for _, w := range words {
			src := strings.ReplaceAll(f.src, "W", `"`+w+`"`)
			// Only the word is judged: an RS256 key file holds no
			// HS256 secret.
			if _, err := Parse("c.yaml", []byte(src)); err != nil && strings.Contains(err.Error(), " "+f.field+": ") {
				t.Errorf("%s: %q refused: %v", path, w, err)
			}
		}
		_, err := Parse("c.yaml", []byte(strings.ReplaceAll(f.src, "W", "none-of-these")))
		if err == nil || !strings.Contains(err.Error(), " "+f.field+": ") {
			t.Errorf("%s: a wrong word: %v, want a problem at %s", path, err, f.field)
			continue
		}
		for _, w := range words {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: the problem %q does not list %q", path, err, w)
			}
		}
	}
}

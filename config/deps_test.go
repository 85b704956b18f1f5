package config

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestDependentFiles: the key files a policy file names are found as
// Parse resolves them, through aliases, and a file that does not decode
// names none.
func TestDependentFiles(t *testing.T) {
	name := filepath.Join("/etc", "floodgate", "policy.yaml")
	for _, c := range []struct {
		data string
		want []string
	}{
		{"server:\n  user:\n    jwt: {alg: HS256, key_file: secret.txt}\n", []string{"/etc/floodgate/secret.txt"}},
		{"server:\n  user:\n    jwt: {alg: RS256, jwks_file: /run/keys/jwks.json}\n", []string{"/run/keys/jwks.json"}},
		{"x: &j {alg: HS256, key_file: ../k}\nserver:\n  user:\n    jwt: *j\n", []string{"/etc/k"}},
		{"server:\n  user:\n    jwt: {key_file: [a, b]}\n", nil},
		{"server: [\n", nil},
		{"routes: []\n", nil},
	} {
		if got := DependentFiles(name, []byte(c.data)); !slices.Equal(got, c.want) {
			t.Errorf("%q: %q, want %q", c.data, got, c.want)
		}
	}
}

package keystore

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeysFileProblemPlaced: a keys file edited by hand into one that does
// not load names the line and column of its problem, as a policy file's
// problems are placed, not only the file: a stray comma, a string for a
// number, a byte order mark.
func TestKeysFileProblemPlaced(t *testing.T) {
	t.Parallel()
	r := reloader(t)
	record := `    {
      "name": "acme",
      "plan": "basic",
      "secrets": [{"sha256": "` + strings.Repeat("ab", 32) + `"}],
      "rate": RATE,
      "created": "2026-12-01T10:00:00Z",
      "updated": "2026-12-01T10:00:00Z"
    }COMMA
`
	for _, tc := range []struct{ name, data, at string }{
		{"trailing comma", "{\n  \"keys\": [\n" + strings.NewReplacer("RATE", "5", "COMMA", ",").Replace(record) + "  ]\n}\n", ":11:3:"},
		{"string rate", "{\n  \"keys\": [\n" + strings.NewReplacer("RATE", `"5"`, "COMMA", "").Replace(record) + "  ]\n}\n", ":7:17:"},
		{"byte order mark", "\ufeff{\"keys\": []}\n", ":1:1:"},
	} {
		path := filepath.Join(t.TempDir(), "keys.json")
		if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := New(context.Background(), Options{Backend: NewFileBackend(path), Policy: r.Policy})
		if err == nil || !strings.Contains(err.Error(), path+tc.at) {
			t.Errorf("%s: %v, want the problem at %s", tc.name, err, path+tc.at)
		}
	}
}

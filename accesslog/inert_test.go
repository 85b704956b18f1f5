package accesslog

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestJSONKeepsClientTextInert logs, to a file, a request whose fields a
// client chose to hold what a terminal or a viewer of the log acts on:
// an 8-bit CSI (U+009B) and NEL (U+0085), the line and paragraph
// separators, and bidi overrides and isolates. The combined format writes
// each of them escaped; the JSON line must too (as \uXXXX, which every
// JSON reader decodes back to the value the client sent), so that an
// operator tailing the log sees text, not colours, new lines or text
// reordered by a client.
func TestJSONKeepsClientTextInert(t *testing.T) {
	hostile := map[string]string{
		"path":       "/a\u009b31mred\u009b0m",
		"user_agent": "curl\u2028{\"status\":200,\"path\":\"/forged\"}\u2029",
		"referer":    "https://x/\u202Egnp.exe\u202C\u2066\u2069\u200F",
		"user":       "ana\u0085bob",
	}
	r := sample()
	r.Path, r.UserAgent, r.Referer, r.User = hostile["path"], hostile["user_agent"], hostile["referer"], hostile["user"]
	path := filepath.Join(t.TempDir(), "access.log")
	l, err := New(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	l.Log(r)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	line := string(b)
	var raw []string
	for _, c := range "\u009b\u0085\u2028\u2029\u202E\u202C\u2066\u2069\u200F" {
		if strings.ContainsRune(line, c) {
			raw = append(raw, fmt.Sprintf("U+%04X", c))
		}
	}
	if len(raw) > 0 {
		t.Errorf("the JSON line holds %s as they are: %q", strings.Join(raw, " "), line)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	for k, v := range hostile {
		if m[k] != v {
			t.Errorf("%s reads back %q, want %q", k, m[k], v)
		}
	}
	combined := string(AppendCombined(nil, r))
	for _, c := range "\u009b\u0085\u2028\u2029\u202E" {
		if strings.ContainsRune(combined, c) {
			t.Errorf("the combined line holds U+%04X as it is: %q", c, combined)
		}
	}
}

package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/keystore"
	"github.com/floodgate/floodgate/penalty"
	"github.com/floodgate/floodgate/policy"
)

// oneBan is a penalty box holding one ban of key; Lift lifts it.
type oneBan struct{ key string }

func (b oneBan) List(context.Context) ([]penalty.Ban, error) {
	return []penalty.Ban{{Rule: "flood", Key: b.key, Until: time.Now().Add(time.Minute)}}, nil
}

func (b oneBan) Lift(_ context.Context, rule, key string) error {
	if rule != "flood" || key != b.key {
		return penalty.ErrNoBan
	}
	return nil
}

// lockedLog is a log's text, written from the server's goroutines.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAuditKeepsHostileValuesOnTheirLine: a ban's key is what a client
// sent; lifted through the API, a key that holds a line of its own (an
// entry forged after a newline, a carriage return, a line separator) and
// a bidi override is recorded as one entry on one line of the audit file
// and one line of the log, and read back exactly as sent.
func TestAuditKeepsHostileValuesOnTheirLine(t *testing.T) {
	t.Parallel()
	key := "evil\n{\"time\":\"2026-01-01T00:00:00Z\",\"actor\":\"root\",\"action\":\"key.revoke\",\"target\":\"acme\"}\r\u2028\u202Exe.exe"
	f, err := config.Parse("p.yaml", []byte("routes:\n  - {name: all, match: {paths: [\"/**\"]}, upstream: \"http://127.0.0.1:1\"}\n"))
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
	path := filepath.Join(dir, "audit.jsonl")
	var log lockedLog
	a, err := New(Options{Tokens: []Token{{Name: "ops", SHA256: sha256.Sum256([]byte("ops-token"))}}, Keys: keys,
		Audit: NewFileAudit(path, 0), Policy: pol, Engine: noEngine{}, Bans: oneBan{key},
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	defer srv.Close()
	call := func(method, path string) []byte {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer ops-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b.Bytes())
		}
		return b.Bytes()
	}
	call("DELETE", "/api/v1/bans?ban=flood&key="+url.QueryEscape(key))

	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if lines := bytes.Count(file, []byte("\n")); lines != 1 || bytes.ContainsAny(file, "\r\u2028") {
		t.Errorf("one entry took %d lines of the audit file, or a line break as is: %q", lines, file)
	}
	var got struct{ Entries []Entry }
	if err := json.Unmarshal(call("GET", "/api/v1/audit"), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Entries) != 1 || got.Entries[0].Target != "flood|"+key || got.Entries[0].Detail["key"] != key || got.Entries[0].Actor != "ops" {
		t.Errorf("the audit log reads %+v, want one entry by ops of the key %q", got.Entries, key)
	}
	if logged := log.String(); strings.Count(logged, "\n") != 1 || strings.ContainsAny(logged, "\r\u2028\u202E") {
		t.Errorf("the log of the lift is not one line of escaped text: %q", logged)
	}
}

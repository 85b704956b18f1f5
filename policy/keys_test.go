package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mapSource is a KeySource over a map, resolving its keys against the
// policy that asks.
type mapSource map[[sha256.Size]byte]func(p *Policy) *Key

func (s mapSource) LookupKey(p *Policy, sum *[sha256.Size]byte) *Key {
	if f := s[*sum]; f != nil {
		return f(p)
	}
	return nil
}

const keysPolicy = `
routes:
  - {name: partner, match: {paths: ["/partner/**"]}, api_key_required: true, upstream: none}
plans:
  - {name: basic, rate: 2, burst: 2, quota: {limit: 10, period: DAY}}
keys:
  - {name: file-key, plan: basic, sha256: "SUM"}
`

func TestKeySource(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	fileSum := sha256.Sum256([]byte("file-secret"))
	data := []byte(strings.Replace(keysPolicy, "SUM", hex.EncodeToString(fileSum[:]), 1))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := NewReloader(ReloaderOptions{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	match := func(raw string) *Match {
		var m Match
		r.Policy().Match(&Request{Method: "GET", Path: "/partner/x", ClientIP: ip("192.0.2.1"), APIKey: raw}, &m)
		return &m
	}
	if m := match("api-secret"); !m.Forbidden {
		t.Fatalf("unknown key not forbidden before a key source")
	}
	src := mapSource{}
	src[sha256.Sum256([]byte("api-secret"))] = func(p *Policy) *Key {
		k, err := p.NewKey("api-key", "basic", KeyOptions{Quota: 500, Generation: 2})
		if err != nil {
			t.Error(err)
		}
		return k
	}
	// The file's key wins over the source's entry for the same hash.
	src[fileSum] = func(p *Policy) *Key { t.Error("source asked for a key of the file"); return nil }
	r.SetKeySource(src)

	m := match("api-secret")
	if m.Forbidden || m.KeyName != "api-key" || m.Plan != "basic" || len(m.Hits) != 2 {
		t.Fatalf("dynamic key: forbidden %v, name %q, plan %q, hits %d", m.Forbidden, m.KeyName, m.Plan, len(m.Hits))
	}
	if got := m.Hits[1].Key; got != "key:api-key#2" {
		t.Errorf("counter key %q, want key:api-key#2", got)
	}
	if got := m.Hits[1].Rule.Limit().Max; got != 500 {
		t.Errorf("quota override %d, want 500", got)
	}
	if m.Limits[1].Name != "basic.quota" || m.Limits[1].Rule == mustLimit(t, r.Policy(), "basic.quota").Rule {
		t.Errorf("override limit %q shares the plan's rule", m.Limits[1].Name)
	}
	if m := match("file-secret"); m.Forbidden || m.KeyName != "file-key" || m.Hits[1].Key != "key:file-key" {
		t.Errorf("file key: %+v", m)
	}
	if name, plan, ok := r.Policy().KeyName("api-secret"); !ok || name != "api-key" || plan != "basic" {
		t.Errorf("KeyName = %q %q %v", name, plan, ok)
	}
	// The source survives a reload.
	if err := os.WriteFile(path, append(data, []byte("\n# changed\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if m := match("api-secret"); m.Forbidden {
		t.Errorf("dynamic key forbidden after a reload")
	}
	if _, err := r.Policy().NewKey("k", "gold", KeyOptions{}); !errors.Is(err, ErrUnknownPlan) {
		t.Errorf("unknown plan: %v", err)
	}
}

func mustLimit(t *testing.T, p *Policy, name string) *Limit {
	t.Helper()
	l, ok := p.Limit(name)
	if !ok {
		t.Fatalf("no limit %q", name)
	}
	return l
}

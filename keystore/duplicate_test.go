package keystore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFileKeyNamedTwiceRefused: a keys file that lists a name twice (two
// files merged by hand, a record copied and not renamed) is refused at
// once, naming the file and the key, as a file that is not JSON is: the
// store would serve one of the two records and change the other, so that
// a key revoked through the API could come back at the next start, with
// the secret of the record the revocation did not reach.
func TestFileKeyNamedTwiceRefused(t *testing.T) {
	t.Parallel()
	r := reloader(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys.json")
	rec := func(name, secret string) Record {
		sum := sha256.Sum256([]byte(secret))
		at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		return Record{Name: name, Plan: "basic", Secrets: []Secret{{SHA256: hex.EncodeToString(sum[:]), Created: at}}, Created: at, Updated: at}
	}
	// An order in which sorting the records by name after a change puts
	// the record it did not change last.
	var recs []Record
	for i := range 12 {
		recs = append(recs, rec(fmt.Sprintf("k%04d", (i*7919)%12), "other"))
	}
	recs[0] = rec("acme", "copied")
	recs = append(recs, rec("acme", "current"))
	data, err := json.Marshal(fileData{Keys: recs})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	s, err := New(ctx, Options{Backend: NewFileBackend(path), Policy: r.Policy})
	if err == nil {
		// What the store did with it: revoke the key, then start again.
		if _, err := s.Update(ctx, "acme", func(r *Record) error { r.Revoked = true; return nil }); err != nil {
			t.Fatal(err)
		}
		again, err := New(ctx, Options{Backend: NewFileBackend(path), Policy: r.Policy})
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{"copied", "current"} {
			if k := lookup(again, r.Policy(), secret); k != nil {
				t.Errorf("key %q revoked, then the store started again: its secret %q works", k.Name(), secret)
			}
		}
		t.Fatal("a keys file that lists a key twice was accepted")
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `"acme"`) {
		t.Errorf("the refusal does not name the file and the key: %v", err)
	}
}

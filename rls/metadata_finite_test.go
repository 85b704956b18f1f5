package rls

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestMetadataNumbersAreFinite: a descriptor's metadata number that is
// infinite or not a number (YAML's !!float with Go's spelling: inf, nan)
// has no JSON form. Such a file must be refused at the value's line and
// field. It loaded, and with RESPONSE_DYNAMIC_METADATA every /json answer
// that carried the metadata was a 500, though its hits were charged: the
// third call below was refused for the two 500s before it.
func TestMetadataNumbersAreFinite(t *testing.T) {
	for _, v := range []string{"!!float inf", "!!float -Inf", "!!float nan", "!!int +inf"} {
		t.Run(v, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "d.yaml")
			src := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n    metadata:\n      ok: 1.5\n      x: " + v + "\n"
			if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := Load([]string{dir}, LoadOptions{})
			want := regexp.MustCompile(`^` + regexp.QuoteMeta(path) + `:7:\d+: descriptors\[0\]\.metadata\.x: `)
			if err != nil {
				if !want.MatchString(err.Error()) {
					t.Fatalf("got %v\nwant %s...", err, want)
				}
				return
			}
			// Loaded: what it does to the answers.
			st, err := memstore.New(memstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			ts := httptest.NewServer(JSONHandler(New(limiter.New(st, limiter.Options{}), cfg, Options{DynamicMetadata: true})))
			defer ts.Close()
			var codes []string
			for range 3 {
				resp, err := http.Post(ts.URL+"/json", "application/json",
					strings.NewReader(`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`))
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				codes = append(codes, resp.Status)
			}
			t.Fatalf("metadata x: %s loaded; three /json calls answered %s", v, strings.Join(codes, ", "))
		})
	}
}

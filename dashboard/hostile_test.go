package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"mime"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// hostileKeys are keys a client can choose (a token's user, a header that
// a limit counts by): markup, a way out of an attribute, a javascript:
// address, bidi overrides and isolates, zero-width, C1, separator and
// byte-order characters, and bytes that are not UTF-8.
var hostileKeys = []string{
	`user:<img/src=x/onerror=alert(1)>`,
	`user:"><svg/onload=alert(2)>`,
	`user:</td></tr><script>alert(3)</script>`,
	`user:javascript:alert(4)`,
	"user:admin\u202Egnp.exe",
	"user:ad\u200Bmin\u2066x\u2069",
	"user:c1\u0085ls\u2028ps\u2029bom\uFEFF",
	"h:X-Tenant=&lt;&#x3C;\\u003c",
}

// TestFeedsCarryHostileKeysAsData: the dashboard's feeds carry what
// clients chose as JSON strings, exactly, and in bytes that no reader can
// take for markup or script (<, >, & and the line and paragraph
// separators escaped); a key that is not UTF-8 arrives as valid text.
// The answers say they are JSON and are not to be kept.
func TestFeedsCarryHostileKeysAsData(t *testing.T) {
	t.Parallel()
	other, limit := ruletest.Rule(t, bucket("other")), ruletest.Rule(t, bucket("per-user"))
	rec := NewRecorder(1000)
	keys := append(slices.Clone(hostileKeys), "user:\xff\xfe")
	for _, k := range keys {
		decide(rec, []*limiter.Rule{other, limit}, k, true)
	}
	rec.Tick(1001)
	h := NewHandler(Options{Recorder: rec, Info: func() Instance { return Instance{ID: hostileKeys[4]} },
		Quotas: func(context.Context) ([]Quota, error) {
			out := []Quota{}
			for _, k := range hostileKeys {
				out = append(out, Quota{Key: k, Plan: k, Limit: k, Capacity: 10, Used: 5, Percent: 50})
			}
			return out, nil
		},
		Reloads: func() []Reload { return []Reload{{Time: time.Unix(1000, 0), Error: hostileKeys[2]}} },
	})
	get := func(path string, into any) {
		t.Helper()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if ct, _, _ := mime.ParseMediaType(w.Header().Get("Content-Type")); ct != "application/json" || w.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("%s: Content-Type %q, Cache-Control %q", path, w.Header().Get("Content-Type"), w.Header().Get("Cache-Control"))
		}
		body := w.Body.Bytes()
		for _, b := range []string{"<", ">", "&", "\u2028", "\u2029"} {
			if bytes.Contains(body, []byte(b)) {
				t.Errorf("%s: %q as is in the answer: %s", path, b, body)
			}
		}
		if err := json.Unmarshal(body, into); err != nil {
			t.Fatalf("%s: %v: %s", path, err, body)
		}
	}
	var ov struct {
		Top       []Hitter
		Instances []Instance
		Reloads   []Reload
	}
	get("/ui/api/overview?since=999", &ov)
	var top []string
	for _, x := range ov.Top {
		top = append(top, x.Key)
	}
	for _, k := range hostileKeys {
		if !slices.Contains(top, k) {
			t.Errorf("key %q: not among the keys limited most as sent: %q", k, top)
		}
	}
	if !slices.Contains(top, "user:\ufffd\ufffd") {
		t.Errorf("a key that is not UTF-8: not among %q as valid text", top)
	}
	if len(ov.Instances) != 1 || ov.Instances[0].ID != hostileKeys[4] || len(ov.Reloads) != 1 || ov.Reloads[0].Error != hostileKeys[2] {
		t.Errorf("instances %+v, reloads %+v", ov.Instances, ov.Reloads)
	}
	var qv struct{ Keys, Nearest []Quota }
	get("/ui/api/quotas", &qv)
	for i, k := range hostileKeys {
		if i >= len(qv.Keys) || qv.Keys[i].Key != k || qv.Keys[i].Plan != k || qv.Keys[i].Limit != k {
			t.Errorf("quota %d: %+v, want the key, plan and limit %q", i, qv.Keys, k)
			break
		}
	}
}

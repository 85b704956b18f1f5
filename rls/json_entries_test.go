package rls

import (
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// TestJSONEntriesRefusedUndecoded: /json refuses a body of more objects
// than a request within the bounds holds before it decodes it: 1 MiB of
// empty entries ("{}," each) was decoded into 340,000 of them, about
// 50 MiB of heap, and then decided. A descriptor of 65 entries is refused
// with 400 naming it; braces inside strings, escaped quotes beside them,
// count for nothing.
func TestJSONEntriesRefusedUndecoded(t *testing.T) {
	ts := jsonServer(t)
	post := func(body string) (int, string) { return postJSON(t, ts.URL, body) }
	withEntries := func(n int, entry string) string {
		var b strings.Builder
		b.WriteString(`{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"a"}`)
		for range n {
			b.WriteString(",")
			b.WriteString(entry)
		}
		b.WriteString(`]}]}`)
		return b.String()
	}

	huge := withEntries(340_000, `{}`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	code, body := post(huge)
	runtime.ReadMemStats(&after)
	if code != http.StatusBadRequest || !strings.Contains(body, "340003 JSON objects, a request at most 4225") {
		t.Errorf("340,001 entries: %d %q, want 400 naming the bound", code, body)
	}
	// The body, sent and read, takes a few MiB; its entries decoded took
	// about 50.
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Errorf("a body of 1 MiB of entries took %d MiB of heap, want under 16", got>>20)
	}

	if code, body := post(withEntries(64, `{"key":"k","value":"v"}`)); code != http.StatusBadRequest ||
		!strings.Contains(body, "descriptor 0: 65 entries, at most 64") {
		t.Errorf("65 entries: %d %q, want 400 naming them", code, body)
	}
	brace := `"\"` + strings.Repeat("{", 10_000) + `"`
	body = `{"domain":"d","descriptors":[{"entries":[{"key":"user","value":` + brace + `}]}]}`
	if code, out := post(body); code != http.StatusOK || !strings.Contains(out, `"limitRemaining":9`) {
		t.Errorf("a value of 10,000 braces: %d %q, want it decided", code, out)
	}
}

package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// TestHitsRefusedBeforeDecoding: a body of more hits than Options.MaxHits
// is refused with 400 bad_request before it is decoded, on /v1/check,
// /v1/peek and /v1/reserve: 64 KiB of empty hits ("{}," each, 21,001 of
// them) took 22 MiB of heap and 126,000 allocations to decode (a decoder
// for every hit) before the count refused it. 32 hits are decided, 33
// refused, and nothing reaches the engine.
func TestHitsRefusedBeforeDecoding(t *testing.T) {
	eng := newEngine(t)
	ts := httptest.NewServer(New(eng, testRules(t), Options{}))
	defer ts.Close()
	post := func(path, body string) (int, string) {
		t.Helper()
		resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	hits := func(n int, hit string) string {
		return `{"hits":[` + strings.Repeat(hit+`,`, n-1) + hit + `]}`
	}
	for _, path := range []string{"/v1/check", "/v1/peek", "/v1/reserve"} {
		body := hits(21_001, `{}`)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		code, out := post(path, body)
		runtime.ReadMemStats(&after)
		if code != http.StatusBadRequest || !strings.Contains(out, `"code":"bad_request"`) || !strings.Contains(out, "21001 hits, at most 32") {
			t.Errorf("%s with 21,001 hits: %d %s, want 400 bad_request counting them", path, code, out)
		}
		// The body, sent and read, takes a few hundred KiB.
		if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
			t.Errorf("%s: a body of 21,001 hits took %d MiB of heap, want under 4", path, got>>20)
		}
		if code, out := post(path, hits(33, `{"limit":"global","key":"k"}`)); code != http.StatusBadRequest || !strings.Contains(out, "33 hits, at most 32") {
			t.Errorf("%s with 33 hits: %d %s, want 400", path, code, out)
		}
	}
	if n := eng.checks.Load() + eng.peeks.Load(); n != 0 {
		t.Fatalf("refused bodies reached the engine %d times", n)
	}
	if code, out := post("/v1/check", hits(32, `{"limit":"global","key":"k"}`)); code != http.StatusOK {
		t.Errorf("32 hits: %d %s, want them decided", code, out)
	}
}

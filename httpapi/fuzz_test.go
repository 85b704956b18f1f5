package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzCheckBody posts arbitrary bodies to /v1/check: nothing panics, every
// answer is a decision (200/429) or a 4xx, and a 4xx never reached the
// engine, so it changed no count.
func FuzzCheckBody(f *testing.F) {
	for _, s := range []string{
		`{"limit":"login","key":"1.2.3.4","cost":1}`,
		`{"hits":[{"limit":"login","key":"a"},{"limit":"global"}]}`,
		`{"limit":"login","cost":0}`,
		`{"limit":"login","cost":-1}`,
		`{"limit":"login","cost":1.0}`,
		`{"limit":"bucket","key":"x","cost":5}`,
		`{"limit":"nope"}`,
		`{"hits":null}`,
		`null`,
		`{"limit":"login","key":"k","x":1}`,
		"\xff\xfe",
		`{"limit":"shadow"}`,
	} {
		f.Add(s)
	}
	eng := newEngine(f)
	h := New(eng, testRules(f), Options{MaxBodyBytes: 4096})
	f.Fuzz(func(t *testing.T, body string) {
		before := eng.checks.Load()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body)))
		reached := eng.checks.Load() != before
		switch {
		case rec.Code == 200 || rec.Code == 429:
			if !reached {
				t.Fatalf("%q: decision %d without asking the engine", body, rec.Code)
			}
		case rec.Code >= 400 && rec.Code < 500:
			if reached {
				t.Fatalf("%q: answered %d after charging the engine", body, rec.Code)
			}
			if !strings.Contains(rec.Body.String(), `"code"`) {
				t.Fatalf("%q: %d without an error code: %s", body, rec.Code, rec.Body)
			}
		default:
			t.Fatalf("%q: status %d", body, rec.Code)
		}
	})
}

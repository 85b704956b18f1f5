package httpapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
)

// benchCheck measures the handler of POST /v1/check on body, from the
// request to the written answer, against limits that always allow.
func benchCheck(b *testing.B, body string) {
	limits := Rules(
		ruletest.Rule(b, floodgate.Limit{Name: "login", Algorithm: floodgate.FixedWindow, Max: 1 << 50, Window: time.Minute}),
		ruletest.Rule(b, floodgate.Limit{Name: "global", Algorithm: floodgate.FixedWindow, Max: 1 << 50, Window: time.Minute}),
	)
	h := New(newEngine(b), limits, Options{})
	raw := []byte(body)
	rd := bytes.NewReader(raw)
	req := httptest.NewRequest(http.MethodPost, "/v1/check", rd)
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(raw)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
}

// BenchmarkCheckHandlerOneHit is a decision on one hit through the
// handler, the strict reading of its body included.
func BenchmarkCheckHandlerOneHit(b *testing.B) {
	benchCheck(b, `{"limit":"login","key":"203.0.113.7","cost":1}`)
}

// BenchmarkCheckHandlerBatch is a decision on a batch of three hits.
func BenchmarkCheckHandlerBatch(b *testing.B) {
	benchCheck(b, `{"hits":[{"limit":"login","key":"user-42","cost":1},{"limit":"global","key":"203.0.113.7"},{"limit":"global"}]}`)
}

package gateway

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestFieldCache: a rule's fields are computed once and then reused, what
// comes back is always the asked rule's, and a rule dropped (by a reload
// of a Matcher of one's own) is freed with its fields: nothing else holds
// it.
func TestFieldCache(t *testing.T) {
	c := newFieldCache()
	r := ruletest.Rule(t, floodgate.Limit{Name: "a", Algorithm: floodgate.TokenBucket, Rate: 10, Per: time.Second, Burst: 10})
	first := c.get(r)
	if again := c.get(r); again != first {
		t.Fatal("the same rule's fields were computed twice")
	}
	var dropped []weak.Pointer[limiter.Rule]
	for i := range 100 {
		ri := ruletest.Rule(t, floodgate.Limit{Name: "a", Algorithm: floodgate.FixedWindow, Max: int64(i + 1), Window: time.Minute})
		if f := c.get(ri); f.Quota != int64(i+1) {
			t.Fatalf("rule %d: fields of quota %d", i, f.Quota)
		}
		dropped = append(dropped, weak.Make(ri))
	}
	for range 10 {
		runtime.GC()
	}
	for i, w := range dropped {
		if w.Value() != nil {
			t.Fatalf("rule %d is still held after it was dropped", i)
		}
	}
	if f := c.get(r); f != first {
		t.Fatalf("after the others: fields %+v, want %+v", f, first)
	}
}

// TestFieldCacheUsed: a Matcher that leaves Match.Fields empty gets the
// Gateway's fields, so its rule's fields are kept after a request.
func TestFieldCacheUsed(t *testing.T) {
	r := ruletest.Rule(t, floodgate.Limit{Name: "a", Algorithm: floodgate.TokenBucket, Rate: 10, Per: time.Second, Burst: 10})
	g, err := New(Options{Matcher: oneRule(r), Engine: memEngine(t)})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	g.Middleware(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Header().Get("RateLimit") == "" {
		t.Fatalf("no RateLimit field: %v", rec.Header())
	}
	r.Prepared(fieldsSlot, func(*limiter.Rule) any {
		t.Fatal("the rule's fields were not kept")
		return nil
	})
}

package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

// TestFieldCache: a rule's fields are computed once and then reused, a
// thousand rules (reloads of a Matcher of one's own) leave at most
// fieldCacheSize entries, and what comes back is always the asked rule's.
func TestFieldCache(t *testing.T) {
	c := newFieldCache()
	r := mustRule(t, floodgate.Limit{Name: "a", Algorithm: floodgate.TokenBucket, Rate: 10, Per: time.Second, Burst: 10}, false)
	first := c.get(r)
	if again := c.get(r); again != first {
		t.Fatal("the same rule's fields were computed twice")
	}
	for i := range 1000 {
		ri := mustRule(t, floodgate.Limit{Name: "a", Algorithm: floodgate.FixedWindow, Max: int64(i + 1), Window: time.Minute}, false)
		if f := c.get(ri); f.Quota != int64(i+1) {
			t.Fatalf("rule %d: fields of quota %d", i, f.Quota)
		}
	}
	n := 0
	for i := range c.slots {
		if c.slots[i].Load() != nil {
			n++
		}
	}
	if n > fieldCacheSize {
		t.Fatalf("%d entries", n)
	}
	if f := c.get(r); f.Quota != first.Quota {
		t.Fatalf("after the flood: quota %d, want %d", f.Quota, first.Quota)
	}
}

// TestFieldCacheUsed: a Matcher that leaves Match.Fields empty gets the
// Gateway's table, so its rule's fields are kept after a request.
func TestFieldCacheUsed(t *testing.T) {
	r := mustRule(t, floodgate.Limit{Name: "a", Algorithm: floodgate.TokenBucket, Rate: 10, Per: time.Second, Burst: 10}, false)
	g, err := New(Options{Matcher: oneRule(r), Engine: memEngine(t)})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	g.Middleware(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Header().Get("RateLimit") == "" {
		t.Fatalf("no RateLimit field: %v", rec.Header())
	}
	kept := false
	for i := range g.rfields.slots {
		if e := g.rfields.slots[i].Load(); e != nil && e.rule == r {
			kept = true
		}
	}
	if !kept {
		t.Fatal("the rule's fields were not kept")
	}
}

package rls

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestMoreThan64DescriptorsRefused: a request of 64 descriptors is
// decided, one of 65 is refused with InvalidArgument before anything is
// charged, over gRPC and over the JSON endpoint; MaxDescriptors moves the
// bound.
func TestMoreThan64DescriptorsRefused(t *testing.T) {
	descs := func(prefix string, n int) []*rlv3.RateLimitDescriptor {
		var ds []*rlv3.RateLimitDescriptor
		for i := range n {
			ds = append(ds, desc("user", fmt.Sprintf("%s%d", prefix, i)))
		}
		return ds
	}
	c, svc := startService(t, mustParse(t, basic), newClock(), Options{})
	ctx := context.Background()

	r := ask(t, c, "d", descs("a", 64)...)
	if r.OverallCode != ok || len(r.Statuses) != 64 || r.Statuses[63].LimitRemaining != 9 {
		t.Fatalf("64 descriptors: %v", r)
	}
	_, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs("a", 65)})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "65 descriptors, at most 64") {
		t.Fatalf("65 descriptors: %v, want InvalidArgument", err)
	}
	// Nothing was charged: a0…a63 were charged once (by the request of
	// 64), a64 never.
	r = ask(t, c, "d", desc("user", "a0"), desc("user", "a63"), desc("user", "a64"))
	if got := []uint32{r.Statuses[0].LimitRemaining, r.Statuses[1].LimitRemaining, r.Statuses[2].LimitRemaining}; fmt.Sprint(got) != "[8 8 9]" {
		t.Errorf("remaining after the refused request: %v, want [8 8 9]", got)
	}

	// The JSON endpoint refuses it alike (400), and charges nothing.
	h := JSONHandler(svc)
	post := func(n int) int {
		var b strings.Builder
		b.WriteString(`{"domain":"d","descriptors":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"entries":[{"key":"user","value":"j%d"}]}`, i)
		}
		b.WriteString(`]}`)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/json", strings.NewReader(b.String())))
		return w.Code
	}
	if code := post(65); code != http.StatusBadRequest {
		t.Errorf("65 descriptors as JSON: %d, want 400", code)
	}
	if r := ask(t, c, "d", desc("user", "j0")); r.Statuses[0].LimitRemaining != 9 {
		t.Errorf("the refused JSON request charged: %v", r)
	}
	if code := post(64); code != http.StatusOK {
		t.Errorf("64 descriptors as JSON: %d, want 200", code)
	}

	// MaxDescriptors moves the bound.
	c3, _ := startService(t, mustParse(t, basic), newClock(), Options{MaxDescriptors: 3})
	if r := ask(t, c3, "d", descs("b", 3)...); r.OverallCode != ok {
		t.Errorf("3 descriptors with MaxDescriptors 3: %v", r)
	}
	if _, err := c3.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs("b", 4)}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("4 descriptors with MaxDescriptors 3: %v, want InvalidArgument", err)
	}
}

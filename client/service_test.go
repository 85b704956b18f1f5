package client_test

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/client"
	"github.com/floodgate/floodgate/httpapi"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/rls"
	"github.com/floodgate/floodgate/store/memstore"
)

func memEngine(t *testing.T) *limiter.Limiter {
	t.Helper()
	st, err := memstore.New(memstore.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return limiter.New(st, limiter.Options{})
}

func TestHTTPCheckPeekAndErrors(t *testing.T) {
	t.Parallel()
	r := ruletest.With(t, floodgate.Limit{Name: "sms", Algorithm: floodgate.FixedWindow, Max: 2, Window: time.Hour}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	ts := httptest.NewServer(httpapi.New(memEngine(t), httpapi.Rules(r), httpapi.Options{}))
	defer ts.Close()
	c := client.NewHTTP(ts.URL, client.HTTPOptions{Timeout: 5 * time.Second})
	ctx := context.Background()
	if d, err := c.Peek(ctx, client.Hit{Limit: "sms", Key: "acct"}); err != nil || !d.Allowed || d.Remaining != 1 {
		t.Fatalf("peek: %+v %v", d, err)
	}
	for i := 1; i <= 2; i++ {
		d, err := c.Check(ctx, client.Hit{Limit: "sms", Key: "acct"})
		if err != nil || !d.Allowed || d.Remaining != int64(2-i) || d.Limit != 2 || d.Binding != "sms" {
			t.Fatalf("check %d: %+v %v", i, d, err)
		}
	}
	d, err := c.Check(ctx, client.Hit{Limit: "sms", Key: "acct"})
	if err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > time.Hour {
		t.Fatalf("3rd: %+v %v", d, err)
	}
	if _, err := c.Check(ctx, client.Hit{Limit: "sms", Key: "acct", Cost: 3}); !errors.Is(err, client.ErrNeverFits) {
		t.Fatalf("cost 3 of 2: %v, want ErrNeverFits", err)
	}
	var se *client.StatusError
	if _, err := c.Check(ctx, client.Hit{Limit: "nope"}); !errors.As(err, &se) || se.Code != 404 {
		t.Fatalf("unknown limit: %v", err)
	}
	// Wait gives up when the next window is past the deadline.
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := c.Wait(wctx, client.WaitOptions{}, client.Hit{Limit: "sms", Key: "acct"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait: %v", err)
	}
}

func TestGRPCCheckAgainstTheRLS(t *testing.T) {
	t.Parallel()
	c := rlsClient(t, `
domain: outbound
descriptors:
  - key: provider
    rate_limit: {unit: hour, requests_per_unit: 3}
`, "outbound")
	ctx := context.Background()
	p := client.Descriptor{{Key: "provider", Value: "sms"}}
	d, err := c.CheckN(ctx, 2, p)
	if err != nil || !d.Allowed || d.Remaining != 1 || d.Binding != "outbound.provider" || d.Limit != 3 {
		t.Fatalf("cost 2: %+v %v", d, err)
	}
	if d, err = c.CheckN(ctx, 2, p); err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > time.Hour {
		t.Fatalf("cost 2 more: %+v %v", d, err)
	}
	if d, err = c.Check(ctx, p); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("cost 1: %+v %v", d, err)
	}
}

// rlsClient serves the rate-limit service with the descriptor file src on
// loopback until the test ends, and returns a client of its domain.
func rlsClient(t *testing.T, src, domain string) *client.GRPC {
	t.Helper()
	cfg, err := rls.Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := rls.NewServer(rls.New(memEngine(t), cfg, rls.Options{}), rls.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		stop()
		<-done
	})
	return client.NewGRPC(conn, client.GRPCOptions{Domain: domain, Timeout: 5 * time.Second})
}

// TestHTTPReserve reserves an estimate through the HTTP API, settles it
// below (the rest comes back) and above it (the overrun is reported), and
// cancels one: a second settle is refused, a Cancel after a Settle does
// nothing.
func TestHTTPReserve(t *testing.T) {
	r := ruletest.With(t, floodgate.Limit{Name: "tokens", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour, Burst: 1000}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	ts := httptest.NewServer(httpapi.New(memEngine(t), httpapi.Rules(r), httpapi.Options{}))
	defer ts.Close()
	c := client.NewHTTP(ts.URL, client.HTTPOptions{Timeout: 5 * time.Second})
	ctx := context.Background()
	res, err := c.Reserve(ctx, time.Minute, client.Hit{Limit: "tokens", Key: "k", Cost: 800})
	if err != nil || !res.Allowed || res.Remaining != 200 {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	if d, _ := c.Reserve(ctx, 0, client.Hit{Limit: "tokens", Key: "k", Cost: 300}); d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("300 with 200 left: %+v", d)
	}
	st, err := res.Settle(ctx, 100)
	if err != nil || st.Overrun != 0 || len(st.Limits) != 1 || st.Limits[0].Remaining != 900 {
		t.Fatalf("settle 100 of 800: %+v %v", st, err)
	}
	if _, err := res.Settle(ctx, 100); !errors.Is(err, client.ErrSettled) {
		t.Fatalf("second settle: %v", err)
	}
	if err := res.Cancel(ctx); err != nil {
		t.Fatalf("cancel after settle: %v", err)
	}
	res2, err := c.Reserve(ctx, 0, client.Hit{Limit: "tokens", Key: "k", Cost: 50})
	if err != nil {
		t.Fatal(err)
	}
	st, err = res2.SettleLimits(ctx, map[string]int64{"tokens": 2000})
	if err != nil || st.Overrun != 2000-50-850 {
		t.Fatalf("settle 2000 of 50 with 850 left: %+v %v", st, err)
	}
	res3, _ := c.Reserve(ctx, 0, client.Hit{Limit: "tokens", Key: "other", Cost: 1000})
	if err := res3.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if d, _ := c.Peek(ctx, client.Hit{Limit: "tokens", Key: "other", Cost: 1000}); !d.Allowed {
		t.Fatalf("a cancelled reservation was kept: %+v", d)
	}
}

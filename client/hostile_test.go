package client_test

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/client"
	"github.com/floodgate/floodgate/httpapi"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// overLimitRLS is an RLS v3 service that answers every call OVER_LIMIT
// with a duration_until_reset of reset, and counts the calls.
type overLimitRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	reset *durationpb.Duration
	calls atomic.Int64
}

func (s *overLimitRLS) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	s.calls.Add(1)
	return &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			Code:               rlsv3.RateLimitResponse_OVER_LIMIT,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: "provider", RequestsPerUnit: 1, Unit: rlsv3.RateLimitResponse_RateLimit_HOUR},
			DurationUntilReset: s.reset,
		}},
	}, nil
}

// TestGRPCWaitOnAHugeResetNeverHammers: an RLS service that answers
// OVER_LIMIT with a reset 9,000 years away (a valid Duration, past what a
// time.Duration holds) asks for the longest wait there is. Wait sleeps
// (here: gives up at once, the wait ending after the deadline) and never
// calls the service again at once.
func TestGRPCWaitOnAHugeResetNeverHammers(t *testing.T) {
	t.Parallel()
	svc := &overLimitRLS{reset: &durationpb.Duration{Seconds: 9000 * 365 * 24 * 3600}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, svc)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	defer func() { srv.Stop(); <-done }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := client.NewGRPC(conn, client.GRPCOptions{Domain: "outbound", Timeout: 10 * time.Second})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var sleeps []time.Duration
	_, err = c.Wait(ctx, client.WaitOptions{OnDenied: func(d client.Decision, sleep time.Duration) {
		mu.Lock()
		sleeps = append(sleeps, sleep)
		mu.Unlock()
		if sleep < d.RetryAfter {
			cancel() // a wait shorter than asked: stop the calls that would follow at once
		}
	}}, client.Descriptor{{Key: "provider", Value: "sms"}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait: %v, want the deadline exceeded at once", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sleeps) == 0 || sleeps[0] != time.Duration(1<<63-1) {
		t.Errorf("sleeps chosen %v, want one sleep of the longest Duration", sleeps)
	}
	if n := svc.calls.Load(); n != 1 {
		t.Errorf("the service was called %d times, want once", n)
	}
}

// TestRetryInterceptorGivesUpOnHugeRetryAfter: a RESOURCE_EXHAUSTED whose
// retry-after metadata is a date in the year 9999 is not retried at once
// even when MaxRetryAfter is the longest Duration: the call's error comes
// back after one call, the wait ending after its deadline.
func TestRetryInterceptorGivesUpOnHugeRetryAfter(t *testing.T) {
	t.Parallel()
	svc := &quotaService{next: func(int, string) outcome {
		return outcome{err: status.Error(codes.ResourceExhausted, "Too Many Requests"),
			trailer: metadata.Pairs("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT")}
	}}
	ri := &client.RetryInterceptor{MaxRetryAfter: time.Duration(1<<63 - 1)}
	conn := startQuota(t, svc, ri)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := call(ctx, conn, "x"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("call: %v, want the server's RESOURCE_EXHAUSTED", err)
	}
	if n := len(svc.calls()); n != 1 {
		t.Fatalf("the server saw %d calls, want 1", n)
	}
}

// TestSettleLimitsWithoutCosts: SettleLimits with no costs (a nil map as
// well as an empty one) keeps every estimate and settles the reservation,
// as its documentation says of the limits not named.
func TestSettleLimitsWithoutCosts(t *testing.T) {
	t.Parallel()
	r := ruletest.With(t, floodgate.Limit{Name: "tokens", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour, Burst: 1000}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	ts := httptest.NewServer(httpapi.New(memEngine(t), httpapi.Rules(r), httpapi.Options{}))
	defer ts.Close()
	c := client.NewHTTP(ts.URL, client.HTTPOptions{Timeout: 10 * time.Second})
	ctx := context.Background()
	for _, costs := range []map[string]int64{nil, {}} {
		res, err := c.Reserve(ctx, time.Minute, client.Hit{Limit: "tokens", Key: "k", Cost: 100})
		if err != nil || !res.Allowed {
			t.Fatalf("reserve: %+v %v", res, err)
		}
		st, err := res.SettleLimits(ctx, costs)
		if err != nil || len(st.Limits) != 1 || st.Limits[0].Remaining != res.Remaining {
			t.Fatalf("SettleLimits(%#v) after a reservation leaving %d: %+v %v, want the estimate kept",
				costs, res.Remaining, st, err)
		}
		if _, err := res.SettleLimits(ctx, costs); !errors.Is(err, client.ErrSettled) {
			t.Fatalf("second SettleLimits(%#v): %v, want ErrSettled", costs, err)
		}
	}
}

// TestHTTPRefusesHitsThatAreNotUTF8: JSON cannot carry a key or a limit
// name that is not valid UTF-8 (encoding/json would send U+FFFD for each
// bad byte), so two distinct binary keys would share one counter. Check,
// Peek and Reserve refuse such a hit, naming it, and send nothing: one
// subject is never charged for another.
func TestHTTPRefusesHitsThatAreNotUTF8(t *testing.T) {
	t.Parallel()
	r := ruletest.With(t, floodgate.Limit{Name: "sms", Algorithm: floodgate.FixedWindow, Max: 1, Window: time.Hour}, limiter.RuleOptions{OnFailure: floodgate.FailClosed})
	ts := httptest.NewServer(httpapi.New(memEngine(t), httpapi.Rules(r), httpapi.Options{}))
	defer ts.Close()
	c := client.NewHTTP(ts.URL, client.HTTPOptions{Timeout: 10 * time.Second})
	ctx := context.Background()
	for _, key := range []string{"acct-\xff", "acct-\xfe"} {
		if _, err := c.Check(ctx, client.Hit{Limit: "sms", Key: key}); !errors.Is(err, client.ErrInvalidHit) ||
			!strings.Contains(err.Error(), "hit 0: key") {
			t.Errorf("Check of key %q: %v, want ErrInvalidHit naming the hit's key", key, err)
		}
	}
	if _, err := c.Peek(ctx, client.Hit{Limit: "sms", Key: "ok"}, client.Hit{Limit: "sms\xc0", Key: "ok"}); !errors.Is(err, client.ErrInvalidHit) ||
		!strings.Contains(err.Error(), "hit 1: limit") {
		t.Errorf("Peek with a limit name that is not UTF-8: %v, want ErrInvalidHit naming hit 1's limit", err)
	}
	if _, err := c.Reserve(ctx, 0, client.Hit{Limit: "sms", Key: "\x80"}); !errors.Is(err, client.ErrInvalidHit) {
		t.Errorf("Reserve of a key that is not UTF-8: %v, want ErrInvalidHit", err)
	}
	// Nothing was charged: the one unit an hour is still there for a
	// subject whose key JSON would have made the same.
	if d, err := c.Check(ctx, client.Hit{Limit: "sms", Key: "acct-\ufffd"}); err != nil || !d.Allowed {
		t.Errorf("check of acct-\\ufffd after the refused keys: %+v %v, want allowed", d, err)
	}
}

package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate/floodgate/client"
)

// A server that allows 3 requests a second (a window starts with its
// first request) and says so in its RateLimit fields. A transport with a
// Pacer holds the fourth request until the window is over instead of
// sending it into a 429; a request whose deadline comes first fails at
// once, unsent.
func ExamplePacer() {
	var mu sync.Mutex
	var window time.Time
	used, refused := 0, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if now := time.Now(); now.Sub(window) >= time.Second {
			window, used = now, 0
		}
		left := time.Until(window.Add(time.Second))
		t := strconv.Itoa(int((left + time.Second - 1) / time.Second))
		w.Header().Set("RateLimit-Policy", `"per-second";q=3;w=1`)
		if used == 3 {
			refused++
			w.Header().Set("RateLimit", `"per-second";r=0;t=`+t)
			w.Header().Set("Retry-After", t)
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		used++
		w.Header().Set("RateLimit", `"per-second";r=`+strconv.Itoa(3-used)+`;t=`+t)
	}))
	defer srv.Close()

	pacer := client.NewPacer(client.PacerOptions{})
	hc := &http.Client{Transport: &client.RetryTransport{Pacer: pacer}}
	for range 4 {
		resp, err := hc.Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	for range 3 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
		} else {
			fmt.Println("not sent:", errors.Is(err, client.ErrHeldBack), errors.Is(err, context.DeadlineExceeded))
			break
		}
	}
	mu.Lock()
	fmt.Println("429s:", refused)
	mu.Unlock()
	s := pacer.Stats()
	fmt.Println("held:", s.Held, "refused locally:", s.Refused)
	// Output:
	// not sent: true true
	// 429s: 0
	// held: 1 refused locally: 1
}

// A backend that refuses everything: with an AdaptiveThrottle, most
// requests are rejected locally (ErrThrottled) instead of adding to its
// load.
func ExampleAdaptiveThrottle() {
	var seen atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	throttle := client.NewAdaptiveThrottle(client.AdaptiveThrottleOptions{K: 2})
	hc := &http.Client{Transport: &client.RetryTransport{Throttle: throttle, MaxAttempts: 1}}
	local := 0
	for range 100 {
		resp, err := hc.Get(srv.URL)
		if errors.Is(err, client.ErrThrottled) {
			local++
			continue
		}
		if err == nil {
			resp.Body.Close()
		}
	}
	fmt.Println("rejected locally:", int64(local) == throttle.Rejected(), local > 50)
	fmt.Println("sent to the backend:", seen.Load() == int64(100-local))
	// Output:
	// rejected locally: true true
	// sent to the backend: true
}

// A backend in trouble answers every attempt with 503: up to 3 attempts
// a request would send it 150 attempts for 50 requests; a retry budget of
// 10% (and no minimum) sends 55.
func ExampleRetryBudget() {
	var seen atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	budget := client.NewRetryBudget(client.RetryBudgetOptions{Ratio: 0.1, MinRetries: -1})
	hc := &http.Client{Transport: &client.RetryTransport{Budget: budget, MaxAttempts: 3, BaseDelay: time.Millisecond}}
	for range 50 {
		if resp, err := hc.Get(srv.URL); err == nil {
			resp.Body.Close()
		}
	}
	fmt.Println("attempts:", seen.Load())
	// Output: attempts: 55
}

// A gRPC server that refuses the first call with RESOURCE_EXHAUSTED and a
// RetryInfo of 100ms: the interceptor waits that long and calls again.
func ExampleRetryInterceptor() {
	var calls atomic.Int32
	refuseFirst := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if calls.Add(1) == 1 {
			st, _ := status.New(codes.ResourceExhausted, "Too Many Requests").
				WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(100 * time.Millisecond)})
			return nil, st.Err()
		}
		return next(ctx, req)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(refuseFirst))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	ri := &client.RetryInterceptor{Pacer: client.NewPacer(client.PacerOptions{})}
	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(ri.Unary), grpc.WithStreamInterceptor(ri.Stream))
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.GetStatus(), "after", calls.Load(), "calls")
	// Output: SERVING after 2 calls
}

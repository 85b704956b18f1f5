package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/client"
	"github.com/floodgate/floodgate/httpapi"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/rls"
	"github.com/floodgate/floodgate/store/memstore"
)

// A provider that allows bursts of 2 SMS and then one a second; Wait
// holds the third send until the provider has room instead of failing it.
func ExampleWait() {
	st, _ := memstore.New(memstore.Options{})
	defer st.Close()
	sms, _ := limiter.NewRule(floodgate.Limit{Name: "sms", Algorithm: floodgate.TokenBucket,
		Rate: 1, Per: time.Second, Burst: 2}, floodgate.FailClosed, false)
	api := httptest.NewServer(httpapi.New(limiter.New(st, limiter.Options{}), httpapi.Rules(sms), httpapi.Options{}))
	defer api.Close()

	c := client.NewHTTP(api.URL, client.HTTPOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waited := 0
	for i := 1; i <= 3; i++ {
		_, err := client.Wait(ctx, func(ctx context.Context) (client.Decision, error) {
			return c.Check(ctx, client.Hit{Limit: "sms", Key: "provider-account"})
		}, client.WaitOptions{OnDenied: func(client.Decision, time.Duration) { waited++ }})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("sent", i)
	}
	fmt.Println("had to wait:", waited > 0)
	// Output:
	// sent 1
	// sent 2
	// sent 3
	// had to wait: true
}

// A server that throttles the first call; the transport waits for its
// Retry-After and tries again.
func ExampleRetryTransport() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "done")
	}))
	defer srv.Close()

	hc := &http.Client{Transport: &client.RetryTransport{MaxAttempts: 3}}
	resp, err := hc.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body), "after", calls.Load(), "calls")
	// Output: 200 done after 2 calls
}

// Calls to a paid provider limited through Floodgate's RLS: one call a
// day for the account, shared by every process that asks the service.
// Wait gives up at once when the next chance lies past its deadline.
func ExampleGRPC_Wait() {
	cfg, err := rls.Parse("outbound.yaml", []byte(`
domain: outbound
descriptors:
  - key: provider
    rate_limit: {unit: day, requests_per_unit: 1}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	st, _ := memstore.New(memstore.Options{})
	defer st.Close()
	srv, _ := rls.NewServer(rls.New(limiter.New(st, limiter.Options{}), cfg, rls.Options{}), rls.ServerOptions{})
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	defer func() { stop(); <-done }()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	c := client.NewGRPC(conn, client.GRPCOptions{Domain: "outbound"})
	for i := 1; i <= 2; i++ {
		wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d, err := c.Wait(wctx, client.WaitOptions{}, client.Descriptor{{Key: "provider", Value: "sms"}})
		cancel()
		if err != nil {
			fmt.Println("call", i, "not sent:", errors.Is(err, context.DeadlineExceeded))
			continue
		}
		fmt.Println("call", i, "sent; remaining today:", d.Remaining)
	}
	// Output:
	// call 1 sent; remaining today: 0
	// call 2 not sent: true
}

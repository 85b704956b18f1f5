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

// A call whose cost is known only afterwards (the tokens of a completion):
// reserve an estimate, make the call, settle with what it used. The
// difference comes back at once; Cancel gives everything back on any
// early return.
func ExampleHTTP_Reserve() {
	st, _ := memstore.New(memstore.Options{})
	defer st.Close()
	tpm, _ := limiter.NewRule(floodgate.Limit{Name: "tokens", Algorithm: floodgate.TokenBucket,
		Rate: 90000, Per: time.Minute, Burst: 90000}, floodgate.FailClosed, false)
	api := httptest.NewServer(httpapi.New(limiter.New(st, limiter.Options{}), httpapi.Rules(tpm), httpapi.Options{}))
	defer api.Close()

	c := client.NewHTTP(api.URL, client.HTTPOptions{})
	ctx := context.Background()
	r, err := c.Reserve(ctx, time.Minute, client.Hit{Limit: "tokens", Key: "key-1", Cost: 4000}) // max_tokens
	if err != nil || !r.Allowed {
		fmt.Println("not now:", err, r)
		return
	}
	defer r.Cancel(ctx) // gives the estimate back if the call fails
	used := int64(1234) // the completion's usage.total_tokens
	s, err := r.Settle(ctx, used)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("overrun:", s.Overrun, "given back:", s.Limits[0].Remaining >= 90000-used-100)
	// Output: overrun: 0 given back: true
}

// Envoy's RLS has no settle: a caller whose cost is known later asks with
// its estimate as hits_addend before the call, and after it asks again
// with the excess when the call used more. The excess is charged only if
// all of it fits (an RLS answer is all or nothing), and a call that used
// less cannot give the rest back: keep estimates low, or use the HTTP
// API's reserve and settle, which do both.
func ExampleGRPC_CheckN_costKnownLater() {
	cfg, err := rls.Parse("llm.yaml", []byte(`
domain: llm
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 90000, name: tokens}
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
	c := client.NewGRPC(conn, client.GRPCOptions{Domain: "llm"})
	key := client.Descriptor{{Key: "api_key", Value: "key-1"}}

	const estimate = 500
	d, err := c.CheckN(ctx, estimate, key) // before the call: the estimate
	if err != nil || !d.Allowed {
		fmt.Println("not now")
		return
	}
	used := uint32(1200) // after the call: what it used
	if used > estimate {
		d, err = c.CheckN(ctx, used-estimate, key) // the excess
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println("excess charged:", d.Allowed, "remaining:", d.Remaining)
	// Output: excess charged: true remaining: 88800
}

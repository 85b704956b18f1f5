package client_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/client"
	"github.com/floodgate/floodgate/httpapi"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// A provider that allows 2 SMS a second; Wait spaces the third send into
// the next second instead of failing it.
func ExampleWait() {
	st, _ := memstore.New(memstore.Options{})
	defer st.Close()
	sms, _ := limiter.NewRule(floodgate.Limit{Name: "sms", Algorithm: floodgate.TokenBucket,
		Rate: 2, Per: time.Second, Burst: 2}, limiter.FailClosed, false)
	api := httptest.NewServer(httpapi.New(limiter.New(st, limiter.Options{}), httpapi.Rules{"sms": sms}, httpapi.Options{}))
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

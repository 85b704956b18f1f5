package rls_test

import (
	"context"
	"fmt"
	"net"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/rls"
	"github.com/floodgate/floodgate/store/memstore"
)

func Example() {
	cfg, err := rls.Parse("limits.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: hour
      requests_per_unit: 2
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
	c := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}},
	}}}
	for range 3 {
		r, err := c.ShouldRateLimit(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(r.OverallCode, r.Statuses[0].LimitRemaining, r.ResponseHeadersToAdd[0].Value)
	}
	// Output:
	// OK 1 "edge.remote_address";q=2;w=3600
	// OK 0 "edge.remote_address";q=2;w=3600
	// OVER_LIMIT 0 "edge.remote_address";q=2;w=3600
}

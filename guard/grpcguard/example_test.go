package grpcguard_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/guard"
	"github.com/floodgate/floodgate/guard/grpcguard"
)

// Example puts a limit of 2 calls a minute per client address in front
// of a gRPC server: the third call is refused with RESOURCE_EXHAUSTED, a
// RetryInfo saying when to call again, and the RateLimit fields in its
// trailer.
func Example() {
	g, err := guard.New(guard.Limits(
		guard.Limit{Name: "per-client", Rate: 2, Per: time.Minute, Paths: []string{"/grpc.health.v1.Health/*"}},
	), guard.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(grpcguard.UnaryServerInterceptor(g)),
		grpc.StreamInterceptor(grpcguard.StreamServerInterceptor(g)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for range 3 {
		var trailer metadata.MD
		_, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
		s := status.Convert(err)
		fmt.Println(s.Code(), trailer.Get("ratelimit"))
		for _, d := range s.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Println("retry in", ri.GetRetryDelay().AsDuration().Round(time.Second))
			}
		}
	}
	// Output:
	// OK ["per-client";r=1;t=30]
	// OK ["per-client";r=0;t=30]
	// ResourceExhausted ["per-client";r=0;t=30]
	// retry in 30s
}

package grpcguard_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/guard"
	"github.com/floodgate/floodgate/guard/grpcguard"
)

// BenchmarkUnary measures a unary call on loopback: without the
// interceptor (bare), and through it with one per-client limit that
// always allows (guarded), so that the difference is the interceptor's
// cost: the admission flow, a decision on the memory store and the
// trailer; and the same for calls with a deadline, which the Guard
// watches while the handler runs (bare-deadline, guarded-deadline).
func BenchmarkUnary(b *testing.B) {
	g, err := guard.New(guard.Limits(guard.Limit{Name: "per-client", Rate: 1 << 28}), guard.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	guarded := []grpc.ServerOption{grpc.UnaryInterceptor(grpcguard.UnaryServerInterceptor(g))}
	for _, bc := range []struct {
		name     string
		opts     []grpc.ServerOption
		deadline bool
	}{
		{"bare", nil, false},
		{"guarded", guarded, false},
		{"bare-deadline", nil, true},
		{"guarded-deadline", guarded, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := grpc.NewServer(bc.opts...)
			srv.RegisterService(&echoDesc, &echo{})
			go srv.Serve(lis)
			defer srv.Stop()
			conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			ctx := context.Background()
			if bc.deadline {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Hour)
				defer cancel()
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				in, out := wrapperspb.String("hi"), new(wrapperspb.StringValue)
				for pb.Next() {
					if err := conn.Invoke(ctx, "/test.Echo/Say", in, out); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

package grpcguard_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/guard"
	"github.com/floodgate/floodgate/guard/grpcguard"
)

// TestStreamCostSetThroughItsContext: a streaming handler that tells its
// cost with grpc.SetTrailer or grpc.SetHeader on its stream's context (as
// a unary handler does, and as grpc-go allows in a streaming handler) is
// charged that cost by an actual limit, as one that calls the stream's own
// SetTrailer is.
func TestStreamCostSetThroughItsContext(t *testing.T) {
	t.Parallel()
	const policy = `version: 1
limits:
  - {name: tokens, rate: 100, per: 1h, key: global, match: {paths: [/test.Cost/Trailer, /test.Cost/Header]}, actual: {header: x-cost}}
`
	handler := func(set func(context.Context, metadata.MD) error) grpc.StreamHandler {
		return func(_ any, st grpc.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := st.RecvMsg(in); err != nil {
				return err
			}
			if err := set(st.Context(), metadata.Pairs("x-cost", "30")); err != nil {
				return err
			}
			return st.SendMsg(wrapperspb.String("done"))
		}
	}
	call := costStreams(t, policy, []grpc.StreamDesc{
		{StreamName: "Trailer", ServerStreams: true, Handler: handler(grpc.SetTrailer)},
		{StreamName: "Header", ServerStreams: true, Handler: handler(grpc.SetHeader)},
	})
	call("Trailer")
	call("Header")
	// 100 an hour, 30 and 30 told: the next stream's estimate of 1 leaves 39.
	if got := first(call("Trailer"), "ratelimit"); !strings.HasPrefix(got, `"tokens";r=39;`) {
		t.Errorf("after two streams that told 30 each: ratelimit %q, want r=39 (each charged what it told)", got)
	}
}

// costStreams serves the streams of a service test.Cost behind the guard
// of policy, and returns a call of one of them that sends a message,
// reads every answer and returns the call's trailer.
func costStreams(t *testing.T, policy string, streams []grpc.StreamDesc) func(method string) metadata.MD {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(guard.File(file), guard.Options{ReloadInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	desc := grpc.ServiceDesc{ServiceName: "test.Cost", HandlerType: (*any)(nil), Streams: streams}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.StreamInterceptor(grpcguard.StreamServerInterceptor(g)))
	srv.RegisterService(&desc, struct{}{})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
		_ = g.Close()
	})
	call := func(method string) metadata.MD {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/test.Cost/"+method)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(wrapperspb.String("x")); err != nil {
			t.Fatal(err)
		}
		_ = st.CloseSend()
		for st.RecvMsg(new(wrapperspb.StringValue)) == nil {
		}
		return st.Trailer()
	}
	return call
}

package grpcguard_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/guard"
	"github.com/floodgate/floodgate/guard/redisguard"
	"github.com/floodgate/floodgate/internal/redistest"
)

// TestClientGoneBeforeTheDecision: a call whose client cancels before the
// Guard decides it (here, while an interceptor in front holds it) never
// reaches its handler: on Redis the engine's call gives up with the
// client (context.Canceled), and the flow passes the call uncharged as it
// passes one whose store failed; the interceptor hands no call whose
// client has gone, and holds no reservation, to its handler. 6 such calls
// against a limit of 3, then 6 messages of per_message streams whose
// clients left before the handler read them (gRPC gives some of them to
// RecvMsg, some not).
func TestClientGoneBeforeTheDecision(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	arrived := make(chan struct{}, 16)
	// holdUntilGone holds a call of Work until its client has left, as an
	// authentication interceptor that takes its time would.
	holdUntilGone := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if info.FullMethod == "/test.Leave/Work" {
			arrived <- struct{}{}
			<-ctx.Done()
		}
		return h(ctx, req)
	}
	rig := newLeaveRig(t, rigOptions{
		policy:       fmt.Sprintf("version: 1\nserver: {store: \"redis://%s/0\"}\nlimits:\n  - {name: three, rate: 3, per: 1h, key: global, match: {paths: [/test.Leave/Work]}}\n  - {name: parts, rate: 3, per: 1h, key: global, match: {routes: [upload]}}\nroutes:\n  - {name: upload, match: {paths: [/test.Leave/Upload]}, upstream: none, grpc_stream: per_message}\n", srv.Addr),
		first:        holdUntilGone,
		guardOptions: guard.Options{OpenStore: redisguard.Open},
	})
	const sent = 6
	for range sent {
		_, err := rig.call(t, "Work", "work", func() {
			select {
			case <-arrived:
			case <-time.After(time.Minute):
				t.Fatal("the call never arrived")
			}
		})
		if status.Code(err) != codes.Canceled {
			t.Fatalf("a call its client cancelled: %v", err)
		}
		rig.waitEnded(t, "work")
	}
	if n := rig.svc.ran.Load(); n != 0 {
		t.Errorf("%d calls whose clients left before the decision reached the handler (a limit of 3), want none", n)
	}

	// A per_message stream whose client left before its messages were
	// decided: none reaches the handler uncharged.
	rig.svc.ran.Store(0)
	for range sent {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		st, err := rig.conn.NewStream(metadata.AppendToOutgoingContext(ctx, "x-do", "late"), &grpc.StreamDesc{ClientStreams: true}, "/test.Leave/Upload")
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(wrapperspb.String("part")); err != nil {
			t.Fatal(err)
		}
		rig.waitStarted(t, "late")
		cancel()
		rig.waitEnded(t, "late")
	}
	if n := rig.svc.ran.Load(); n != 0 {
		t.Errorf("%d messages whose clients left before they were decided reached the handler (a limit of 3), want none", n)
	}
}

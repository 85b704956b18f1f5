package grpcguard_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestQueuePlacePastTheDeadline: a call (or a per_message stream's
// message) whose place in a leaky queue comes only after its deadline
// does not hold that place until the deadline to fail then: it leaves the
// queue at once, its place given back, and its client gets
// DEADLINE_EXCEEDED while its deadline is still ahead, as client.Wait
// gives up at once on a wait past its deadline. The next such call finds
// the place free (a queue of one: it is not refused as over the limit).
func TestQueuePlacePastTheDeadline(t *testing.T) {
	t.Parallel()
	rig := newLeaveRig(t, rigOptions{policy: `version: 1
routes:
  - {name: upload, match: {paths: [/test.Leave/Upload]}, upstream: none, grpc_stream: per_message}
  - {name: work, match: {paths: [/test.Leave/Work]}, upstream: none}
limits:
  - {name: shaped, algorithm: leaky_queue, rate: 1, per: 1h, burst: 1, key: global, match: {routes: [work]}}
  - {name: uploads, algorithm: leaky_queue, rate: 1, per: 1h, burst: 1, key: global, match: {routes: [upload]}}
`})
	const deadline = 20 * time.Second // far below the hour the queue asks, far above any answer's way back
	if _, err := rig.call(t, "Work", "ok", nil); err != nil {
		t.Fatalf("first call: %v, want it through at once", err)
	}
	for i := 1; i <= 2; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		err := rig.conn.Invoke(metadata.AppendToOutgoingContext(ctx, "x-do", "queued"), "/test.Leave/Work",
			wrapperspb.String("x"), new(wrapperspb.StringValue))
		left := ctx.Err()
		cancel()
		if status.Code(err) != codes.DeadlineExceeded || left != nil {
			t.Errorf("queued call %d: %v (its context: %v), want DEADLINE_EXCEEDED from the server before the deadline", i, err, left)
		}
	}
	if n := rig.svc.ran.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once (the first call)", n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	st, err := rig.conn.NewStream(metadata.AppendToOutgoingContext(ctx, "x-do", "queued"), &grpc.StreamDesc{ClientStreams: true}, "/test.Leave/Upload")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"first", "second"} { // the second's place is an hour away
		if err := st.SendMsg(wrapperspb.String(m)); err != nil {
			break // the stream ended: RecvMsg tells how
		}
	}
	err = st.RecvMsg(new(wrapperspb.StringValue))
	if left := ctx.Err(); status.Code(err) != codes.DeadlineExceeded || left != nil {
		t.Errorf("stream with a queued message: %v (its context: %v), want DEADLINE_EXCEEDED before the deadline", err, left)
	}
	if n := rig.svc.ran.Load(); n != 2 {
		t.Errorf("the handlers were given %d calls and messages, want 2 (the first call, the first message)", n)
	}
}

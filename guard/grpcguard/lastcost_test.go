package grpcguard_test

import (
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestCostToldAsTheWorkGoesIsTheLast: a streaming handler that tells its
// cost as its work goes (grpc.SetTrailer after each message, so that a
// call ended early still tells what it did; each call adds its value to
// those set before) is charged the last cost it told, not the first, and
// one that tells a provisional cost in its header and the cost in its
// trailer is charged the trailer's. Against 100 an hour: three messages
// told 10, 20 and 30, then a header of 1 and a trailer of 30, leave 39 to
// the next stream's estimate of 1. (The first value set was read, the
// header's before the trailer's: 10 and 1 were charged, leaving 88.)
func TestCostToldAsTheWorkGoesIsTheLast(t *testing.T) {
	t.Parallel()
	const policy = `version: 1
limits:
  - {name: tokens, rate: 100, per: 1h, key: global, match: {paths: [/test.Cost/Steps, /test.Cost/Header]}, actual: {header: x-cost}}
`
	steps := func(_ any, st grpc.ServerStream) error {
		if err := st.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			return err
		}
		for i := 1; i <= 3; i++ {
			if err := st.SendMsg(wrapperspb.String("part")); err != nil {
				return err
			}
			st.SetTrailer(metadata.Pairs("x-cost", strconv.Itoa(10*i)))
		}
		return nil
	}
	header := func(_ any, st grpc.ServerStream) error {
		if err := st.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			return err
		}
		if err := st.SendHeader(metadata.Pairs("x-cost", "1")); err != nil {
			return err
		}
		st.SetTrailer(metadata.Pairs("x-cost", "30"))
		return st.SendMsg(wrapperspb.String("done"))
	}
	call := costStreams(t, policy, []grpc.StreamDesc{
		{StreamName: "Steps", ServerStreams: true, Handler: steps},
		{StreamName: "Header", ServerStreams: true, Handler: header},
	})
	if got := call("Steps")["x-cost"]; strings.Join(got, " ") != "10 20 30" {
		t.Fatalf("the costs the client was told: %q, want 10 20 30", got)
	}
	call("Header")
	if got := first(call("Steps"), "ratelimit"); !strings.HasPrefix(got, `"tokens";r=39;`) {
		t.Errorf("after streams that told 10, 20, 30, then 1 and 30: ratelimit %q, want r=39 (each charged its last word, 30)", got)
	}
}

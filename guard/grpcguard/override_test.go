package grpcguard_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestMethodOverrideCannotDodgeALimit: a gRPC call is a POST whatever its
// metadata says, and its handler serves it as one: under method_override:
// honor, a call naming GET (or any other method) in
// x-http-method-override or its kin still meets the limits of POST. Under
// reject it is refused, as an HTTP request is.
func TestMethodOverrideCannotDodgeALimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		setting string
		want    []codes.Code // for the overriding calls, in turn
	}{
		{"honor", []codes.Code{codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}},
		{"strip", []codes.Code{codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}},
		{"reject", []codes.Code{codes.InvalidArgument, codes.InvalidArgument, codes.InvalidArgument}},
	} {
		t.Run(c.setting, func(t *testing.T) {
			t.Parallel()
			rig := newLeaveRig(t, rigOptions{policy: `version: 1
server: {method_override: ` + c.setting + `}
limits:
  - {name: writes, rate: 1, per: 1h, key: global, match: {methods: [POST], paths: [/test.Leave/Work]}}
`})
			for i, field := range []string{"x-http-method-override", "x-http-method", "x-method-override"} {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := rig.conn.Invoke(metadata.AppendToOutgoingContext(ctx, field, "GET"), "/test.Leave/Work",
					wrapperspb.String("x"), new(wrapperspb.StringValue))
				cancel()
				if status.Code(err) != c.want[i] {
					t.Errorf("a call with %s: GET: %v, want %v", field, err, c.want[i])
				}
			}
			if got := rig.svc.ran.Load(); got > 1 {
				t.Errorf("%d calls reached the handler past a limit of 1", got)
			}
		})
	}
}

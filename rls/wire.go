package rls

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// serviceDesc is rlsv3.RateLimitService_ServiceDesc with a handler of its
// own for ShouldRateLimit: one that counts a request's descriptors and
// entries in its wire form before decoding it (see
// handleShouldRateLimit).
var serviceDesc = grpc.ServiceDesc{
	ServiceName: rlsv3.RateLimitService_ServiceDesc.ServiceName,
	HandlerType: (*rlsv3.RateLimitServiceServer)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: handleShouldRateLimit}},
	Streams:     []grpc.StreamDesc{},
	Metadata:    rlsv3.RateLimitService_ServiceDesc.Metadata,
}

// handleShouldRateLimit is the generated handler of ShouldRateLimit, but
// for the order of its work: the message is taken as it came (an Empty
// keeps every field of it as unknown bytes, a copy of them), its
// descriptors and entries are counted there, and a request over
// Options.MaxDescriptors or Options.MaxEntries is refused with
// InvalidArgument before it is decoded (an interceptor sees such a call
// with an empty request). Decoding makes an object of every entry: 1 MiB
// of empty entries, 2 bytes each on the wire, was 500,000 of them, 62 MiB
// of heap for one call, and a connection may hold 256 calls.
func handleShouldRateLimit(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	s := srv.(*Service)
	var wire emptypb.Empty
	if err := dec(&wire); err != nil {
		return nil, err
	}
	b := wire.ProtoReflect().GetUnknown()
	in := new(rlsv3.RateLimitRequest)
	refused := s.countWire(b)
	if refused == nil {
		if err := proto.Unmarshal(b, in); err != nil {
			return nil, status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
		}
	}
	// A refused call still goes through the interceptor (which counts
	// the calls), with its request left empty.
	handler := func(ctx context.Context, req any) (any, error) {
		if refused != nil {
			s.opts.Stats.serviceError()
			return nil, refused
		}
		return s.ShouldRateLimit(ctx, req.(*rlsv3.RateLimitRequest))
	}
	if interceptor == nil {
		return handler(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}
	return interceptor(ctx, in, info, handler)
}

// Field numbers of RateLimitRequest.descriptors and
// RateLimitDescriptor.entries.
const (
	wireDescriptors protowire.Number = 2
	wireEntries     protowire.Number = 1
)

// countWire refuses a RateLimitRequest in wire form b that holds more
// descriptors than s.maxDesc, or a descriptor with more entries than
// s.maxEnts, as validate refuses the decoded request. It allocates
// nothing; what it cannot read it leaves to the decoder to refuse.
func (s *Service) countWire(b []byte) error {
	descs := 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if num == wireDescriptors && typ == protowire.BytesType {
			d, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil
			}
			if ents := countField(d, wireEntries); ents > s.maxEnts {
				return tooManyEntries(descs, ents, s.maxEnts)
			}
			descs++
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil
		}
		b = b[n:]
	}
	if descs > s.maxDesc {
		return tooManyDescriptors(descs, s.maxDesc)
	}
	return nil
}

// countField counts the length-delimited fields numbered num in the wire
// form of a message, up to where it cannot be read.
func countField(b []byte, num protowire.Number) int {
	count := 0
	for len(b) > 0 {
		got, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return count
		}
		b = b[n:]
		if got == num && typ == protowire.BytesType {
			count++
		}
		if n = protowire.ConsumeFieldValue(got, typ, b); n < 0 {
			return count
		}
		b = b[n:]
	}
	return count
}

func tooManyDescriptors(n, most int) error {
	return status.Errorf(codes.InvalidArgument, "rls: %d descriptors, at most %d", n, most)
}

func tooManyEntries(desc, n, most int) error {
	return status.Errorf(codes.InvalidArgument, "rls: descriptor %d: %d entries, at most %d", desc, n, most)
}

// Package grpcguard puts a Guard (package guard) in front of a gRPC
// server: its interceptors take every call through the gateway's
// admission flow, with the Guard's policy and engine, as the HTTP
// middleware does with a request.
//
//	g, err := guard.New(guard.File("policy.yaml"), guard.Options{})
//	srv := grpc.NewServer(
//		grpc.UnaryInterceptor(grpcguard.UnaryServerInterceptor(g)),
//		grpc.StreamInterceptor(grpcguard.StreamServerInterceptor(g)))
//
// A call is a request with the method POST, the full method name as its
// path (/package.Service/Method, so that a route or a limit matches
// "/package.Service/*" or one method), the :authority as its host, the
// incoming metadata as its header fields and the connection's peer as
// its address. Keys come from the metadata as from header fields: the API
// key (x-api-key, or the policy's api_key_header), the user of a verified
// token (authorization: Bearer …), header:NAME, and the client's address
// through trusted proxies (x-forwarded-for, as a proxy in front such as
// Envoy sets it).
//
// A call over a limit gets RESOURCE_EXHAUSTED, its message Too Many
// Requests (or Limit Exceeded for a quota; a limit whose refusal has a
// body of its own, the text of the refusal's status, and UNAVAILABLE for
// a 503 one), with a google.rpc.RetryInfo
// detail saying when the same call would pass; the refusals of the flow
// are PERMISSION_DENIED for a missing or unknown API key, UNAUTHENTICATED
// for a token that does not verify (with a www-authenticate trailer),
// INVALID_ARGUMENT for a bad request. The RateLimit fields of every call
// that a limit covered, refused or not, are sent as trailing metadata:
// ratelimit-policy, ratelimit and, on a refusal, retry-after (the names in
// lower case, the values as in HTTP). client.RetryInterceptor reads them.
//
// A limit that counts answers by status (count_on) sees the call's gRPC
// code as the HTTP status it stands for: UNAUTHENTICATED is 401,
// PERMISSION_DENIED 403, NOT_FOUND 404, RESOURCE_EXHAUSTED 429,
// UNAVAILABLE 503, OK 200 (and so on, as google.rpc.Code documents). A
// cost is read from metadata where a policy file says header: an
// estimate from the call's metadata, an actual cost from the header or
// trailer metadata the handler sets (the last value it set, the
// trailer's before the header's). No message is read for a cost: an
// estimate from the body takes its default. Metrics count the decisions
// as the gateway's. A handler's error counts as the code grpc-go sends
// for it: a plain context error returned as it is (or wrapped) is
// CANCELLED (499) or DEADLINE_EXCEEDED (504), not UNKNOWN. A call
// cancelled within 100 ms of its deadline (a quarter of the time it had,
// when shorter) counts as DEADLINE_EXCEEDED: that is how a client's
// deadline usually reaches the server, before the server's own timer.
//
// A call held in a leaky queue waits there for its place, as a request
// does; one whose place would come after its deadline is refused at once
// (RESOURCE_EXHAUSTED with a RetryInfo of the time after which its place
// would come within its deadline) and charged nothing, as the gateway
// refuses a request whose place would come past its write timeout.
//
// A call is a POST whatever its metadata says: a method override field
// (x-http-method-override and its kin) never makes it meet the limits of
// another method, under method_override: honor too (reject refuses it).
// A call, or a message of a per_message stream, whose client has gone
// before its handler would get it is not handed to the handler (the
// client gets nothing; gRPC ends it CANCELLED), unless it holds a
// reservation: as floodgate serve forwards such a request, the handler's
// answer then decides the charge.
//
// A streaming call is charged as its route's grpc_stream says: per_stream
// (the default) decides once when the stream opens, and holds its
// concurrency leases and reservations until the handler returns;
// per_message decides each message the client sends as it is received,
// and nothing when the stream opens. A message refused is not given to
// the handler: RecvMsg returns the refusal, which the handler returns as
// it returns any error of RecvMsg, ending the stream. The trailers carry
// the fields of the stream's last decision. A message's answer is its
// being taken (OK): a count_on limit on a per_message route never sees
// the code the stream ends with.
//
// A route's overload control caps the calls its handlers run at once, and
// a call shed by it ends UNAVAILABLE. The adaptive limit learns from the
// latency to the call's status line: the first header or message the
// handler sends on the stream, else its return (with its code's HTTP
// status: an UNAVAILABLE of the handler's is a drop). The time a
// streaming handler waited in RecvMsg before that is its client's pace
// and is left out, as a slow upload's body is on the HTTP engines: a
// client stream or a bidi stream whose client sends slowly does not read
// as a slow service.
package grpcguard

package gateway

import (
	"context"
	"net/http"
	"net/netip"
	"time"

	"github.com/floodgate/floodgate/identity"
	"github.com/floodgate/floodgate/policy"
)

// Request is what the request path and its Matcher read of an HTTP
// request. Each HTTP engine fills one per request (net/http from its
// *http.Request, the edge engine from its own buffers), so that the path
// from a request to its answer is the same whatever engine serves it.
//
// The strings of a Request may be views of an engine's buffers: they are
// valid only until the request's answer is written, and a Matcher that
// keeps one must copy it.
type Request struct {
	// Method is the request's method, as matched: a method override the
	// gateway honours (OverrideHonor) replaces it.
	Method string
	// Host is the Host field (or the target's authority).
	Host string
	// Path is the target's path, decoded.
	Path string
	// RawPath is the target's path as sent, escaped, when it is not
	// Path's default escaping (url.URL.RawPath), or "": a path holding an
	// escaped slash ("%2F") has another reading by some upstreams, which
	// limits also match (policy.Request.RawPath).
	RawPath string
	// Proto is the protocol, such as "HTTP/1.1".
	Proto string
	// Peer is the address of the connection's other end (the zero Addr
	// when it is not an IP address).
	Peer netip.Addr
	// Header reads the request's header fields.
	Header identity.Header
	// HTTP is the net/http request when net/http serves it (middleware
	// use and the net/http engine), nil otherwise.
	HTTP *http.Request
	// Known, when set, is who sent the request as a log already says: a
	// request decided again (a replay, an explanation of a logged
	// request). A PolicyMatcher takes what it gives instead of working it
	// out from the peer and the header fields.
	Known *Known

	// PeerText is Peer.String() when an engine keeps it (per connection),
	// "" otherwise: an IPv4 client's counter key is then not formatted
	// again for each request.
	PeerText string
	// NoOverride is set by an engine that saw every field name and no
	// method override header among them.
	NoOverride bool
	// WriteDeadline is when the request's answer must be written by, as
	// the engine serving it counts its server's write timeout
	// (server.timeouts.write, from the end of the request's headers), or a
	// gRPC call's deadline (package guard/grpcguard); the zero time for
	// none. Past it the answer can no longer reach the
	// client: a request whose place in a leaky queue would come then is
	// refused at once (429) instead of being held and forwarded.
	WriteDeadline time.Time
}

// Known is what is already known of who sent a request. Each field left
// zero is worked out as for any request.
type Known struct {
	// ClientIP is the client's address as resolved (trusted proxies
	// already followed): the request is counted as coming from it.
	ClientIP netip.Addr
	// ClientKey, when set, is the client as counted when no address names
	// it (the access log's client field: "unknown@" and a trusted proxy's
	// key); ClientIP is then the peer that sent the request.
	ClientKey string
	// UserKnown says that User is the request's user (empty: anonymous),
	// as verified when the request was served: no token is verified, and
	// no user header read.
	UserKnown bool
	User      string
	// APIKey is the API key itself, when the log holds it; KeyName names
	// it instead (a key's name, or "?" and a hash prefix, as the access
	// log shows it; see policy.Request.KeyName). Either is used only when
	// the request carries no API key header.
	APIKey  string
	KeyName string
}

// RequestOf returns the view of a net/http request.
func RequestOf(r *http.Request) *Request {
	v := new(Request)
	v.from(r)
	return v
}

// from fills v from a net/http request. Its path is net/http's reading of
// the target (URL.Path and URL.RawPath), which TargetPath reads alike for
// the edge engine, but for the "" of an absolute-form target without a
// path, which is "/" on both.
func (v *Request) from(r *http.Request) {
	*v = Request{Method: r.Method, Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, Proto: r.Proto,
		Peer: identity.ParsePeer(r.RemoteAddr), Header: r.Header, HTTP: r}
	if v.Path == "" {
		v.Path = "/"
	}
}

// writeDeadlineOf returns when the answer to r must be written by: its
// server's WriteTimeout from now (a handler starts once its request's
// headers are read, when net/http starts the timeout, for HTTP/1 as for
// an HTTP/2 stream), or the zero time when its server has none or is not
// known.
func writeDeadlineOf(ctx context.Context) time.Time {
	if srv, ok := ctx.Value(http.ServerContextKey).(*http.Server); ok && srv.WriteTimeout > 0 {
		return time.Now().Add(srv.WriteTimeout)
	}
	return time.Time{}
}

// header returns the first value of a field (its name canonical). Host is
// the host the request is routed by, as routes read it (policy.HostOnly),
// as header:Host keys read it: net/http's server takes the field out of
// the header, and an absolute-form target's host wins over it.
func (v *Request) header(name string) string {
	if name == "Host" {
		return policy.HostOnly(v.Host)
	}
	if v.Header == nil {
		return ""
	}
	return v.Header.Get(name)
}

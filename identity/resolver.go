package identity

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/floodgate/floodgate/internal/intern"
)

// DefaultIPv6Prefix is the prefix length IPv6 clients are keyed by: a /64
// is the smallest allocation a subscriber usually gets.
const DefaultIPv6Prefix = 64

// DefaultAPIKeyHeader is the request header that carries a client's API
// key.
const DefaultAPIKeyHeader = "x-api-key"

// maxUserLen bounds a user taken from a header or a claim.
const maxUserLen = 256

// Options configures a Resolver. The zero value trusts no proxy, keys IPv6
// by /64 and finds no users.
type Options struct {
	// TrustedProxies are the peers whose forwarding header is believed,
	// and the hops skipped while reading it.
	TrustedProxies []netip.Prefix
	// ForwardedHeader is the one header read from trusted proxies:
	// X-Forwarded-For (default) or Forwarded (RFC 7239). Reading only one
	// keeps a client from smuggling the other through a proxy that does
	// not rewrite it.
	ForwardedHeader string
	// IPv6Prefix is the prefix length of IPv6 client keys (default 64).
	IPv6Prefix int
	// JWT, when set, takes the user from a verified token.
	JWT *JWTOptions
	// UserHeader, when set, takes the user from this header, but only
	// when the peer is a trusted proxy.
	UserHeader string
	// TokenCacheSize bounds the verified tokens kept until they expire
	// (0: DefaultTokenCacheSize), at most TokensPerUser of one user.
	TokenCacheSize int
}

// Identity is what a Resolver found out about one request.
type Identity struct {
	// ClientIP is the client's address (IPv4-mapped addresses unmapped);
	// the zero Addr when the peer is not an IP address, or when a trusted
	// proxy forwarded an address that cannot be read.
	ClientIP netip.Addr
	// ClientKey is the client as counted: the IPv4 address, the IPv6
	// prefix ("2001:db8:1:2::/64"), "unknown" (a peer that is not an IP
	// address), or "unknown@" and the key of the trusted proxy that
	// forwarded an unreadable address (UnknownClientKey).
	ClientKey string
	// Peer is the address of the connection's other end.
	Peer netip.Addr
	// PeerTrusted reports whether Peer is a trusted proxy.
	PeerTrusted bool
	// User is the verified user, or "".
	User string
	// UserError says why a presented token gave no user (nil when no
	// token was presented or it verified). A token too long to verify is
	// presented too (ReasonTooLong). What a request with a bad token gets
	// is the caller's to decide: the gateway answers 401 on a route with
	// per-user limits unless the route says on_invalid_token: anonymous.
	UserError error
}

// Resolver works out the Identity of requests. It is immutable and safe for
// concurrent use.
type Resolver struct {
	trusted    []netip.Prefix
	header     string
	v6bits     int
	jwt        *Verifier
	tokens     *tokenCache
	userHeader string
	userField  string // userHeader, canonical
	// single are the fields that name a request's user, in canonical
	// form: a request may carry each once (SingleFields).
	single []string
	// keys holds the client keys formatted again and again (the requests
	// of one client), so that they cost no allocation.
	keys intern.Table
}

// NewResolver checks the options and loads the JWT keys.
func NewResolver(o Options) (*Resolver, error) {
	r := &Resolver{v6bits: o.IPv6Prefix, userHeader: o.UserHeader}
	if r.v6bits == 0 {
		r.v6bits = DefaultIPv6Prefix
	}
	if r.v6bits < 1 || r.v6bits > 128 {
		return nil, fmt.Errorf("identity: ipv6 prefix must be between 1 and 128, got %d", o.IPv6Prefix)
	}
	switch strings.ToLower(o.ForwardedHeader) {
	case "", "x-forwarded-for":
		r.header = HeaderXForwardedFor
	case "forwarded":
		r.header = HeaderForwarded
	default:
		return nil, fmt.Errorf("identity: forwarded header must be X-Forwarded-For or Forwarded, got %q", o.ForwardedHeader)
	}
	for _, p := range o.TrustedProxies {
		if !p.IsValid() {
			return nil, fmt.Errorf("identity: invalid trusted proxy prefix")
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
		}
		r.trusted = append(r.trusted, p.Masked())
	}
	if o.JWT != nil {
		v, err := NewVerifier(*o.JWT)
		if err != nil {
			return nil, err
		}
		r.jwt = v
		r.tokens = newTokenCache(o.TokenCacheSize)
		r.single = append(r.single, http.CanonicalHeaderKey(v.o.Header))
	}
	if r.userHeader != "" {
		r.userField = http.CanonicalHeaderKey(r.userHeader)
		if h := r.userField; !slices.Contains(r.single, h) {
			r.single = append(r.single, h)
		}
	}
	return r, nil
}

// SingleFields returns the fields, in canonical form, that name the user
// of a request (the token's, the user header): the resolver reads the
// first line of each, and an upstream may read another, so a request that
// carries one of them twice names two users and is to be refused.
func (r *Resolver) SingleFields() []string { return r.single }

// UserHeader returns the user header, in canonical form, or "" when none
// is configured. It is believed only from a trusted proxy: a copy another
// peer sent is to be removed before the request is passed on, so that an
// upstream that reads it is never told a user the client chose.
func (r *Resolver) UserHeader() string { return r.userField }

// Trusted reports whether a is a trusted proxy.
func (r *Resolver) Trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Header is the read-only view of a request's header fields that a Resolver
// reads; http.Header is one, and each HTTP engine of the gateway gives one.
// Names are given in canonical form.
type Header interface {
	// Get returns the first value of a field, or "".
	Get(name string) string
	// Values returns every value of a field (one per line).
	Values(name string) []string
}

// ClientIP returns the client's address for a connection from remoteAddr
// carrying header h, following the rules in the package documentation: the
// zero Addr when a trusted proxy forwarded an address that cannot be read.
func (r *Resolver) ClientIP(remoteAddr string, h Header) netip.Addr {
	peer := ParsePeer(remoteAddr)
	if !peer.IsValid() || !r.Trusted(peer) {
		return peer
	}
	a, _ := clientIP(peer, h, r.header, r.Trusted)
	return a
}

// Key returns the key a client address is counted under: the IPv4 address
// itself, or the IPv6 address masked to the configured prefix.
func (r *Resolver) Key(a netip.Addr) string {
	if !a.IsValid() {
		return "unknown"
	}
	var buf [64]byte // formatted on the stack, kept in r.keys
	return r.keys.String(appendClientKey(buf[:0], a, r.v6bits))
}

// ClientKey returns the key of a client address: IPv4 (and IPv4-mapped)
// addresses whole, IPv6 masked to v6bits, and "unknown" for the zero Addr.
// An address of the well-known NAT64 prefix 64:ff9b::/96 (RFC 6052) is
// an IPv4 client written as IPv6 by a translator in front of an IPv6-only
// service: it is keyed as the IPv4 address it holds, since a /64 would put
// every IPv4 client of that translator on one counter.
func ClientKey(a netip.Addr, v6bits int) string {
	if !a.IsValid() {
		return "unknown"
	}
	var buf [64]byte
	return string(appendClientKey(buf[:0], a, v6bits))
}

// ClientAddr returns the address a client is known by: an IPv4-mapped
// address, or one of the NAT64 prefix 64:ff9b::/96, as the IPv4 address
// it holds, and an IPv6 address without its zone. ClientKey keys a client
// by it, and the allow and deny lists (package access) judge it by it, so
// that an IPv4 client written as IPv6 by a translator is one client
// everywhere.
func ClientAddr(a netip.Addr) netip.Addr {
	a = a.Unmap().WithZone("")
	if a.Is6() && nat64.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte(b[12:]))
	}
	return a
}

// appendClientKey appends the key of a valid client address to dst.
func appendClientKey(dst []byte, a netip.Addr, v6bits int) []byte {
	a = ClientAddr(a)
	if a.Is4() {
		return a.AppendTo(dst)
	}
	p, err := a.Prefix(v6bits)
	if err != nil {
		return a.AppendTo(dst)
	}
	return p.AppendTo(dst)
}

// nat64 is the well-known prefix of IPv4 addresses translated to IPv6
// (RFC 6052 §2.1), the address in its last 32 bits.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// UnknownClientKey returns the key of the clients whose address the
// trusted proxy via forwarded in a form that cannot be read:
// "unknown@" and via's own key. They share one counter per reporting
// proxy, apart from the proxy's own requests and from any real address,
// so an unreadable hop neither escapes its limits (its text is not the
// key) nor spends the proxy's.
func UnknownClientKey(via netip.Addr, v6bits int) string {
	return "unknown@" + ClientKey(via, v6bits)
}

// Resolve works out the identity of req at the current time.
func (r *Resolver) Resolve(req *http.Request) Identity {
	return r.ResolveAt(req, time.Now())
}

// ResolveAt works out the identity of req, verifying its token (if any)
// at now. Client, Token and User do the same in steps, so that a caller
// verifies a token only when it needs the user. A request that presents a
// token has the token's user or none (UserError says why): a trusted
// proxy's user header names the user only of a request without a token.
func (r *Resolver) ResolveAt(req *http.Request, now time.Time) Identity {
	id := r.Client(req)
	if tok := r.Token(req); tok != "" {
		id.User, id.UserError = r.User(tok, now)
	}
	return id
}

// headerUser returns the user a trusted proxy names in the user header.
func (r *Resolver) headerUser(h Header, peerTrusted bool) string {
	if r.userHeader == "" || !peerTrusted {
		return ""
	}
	if u := strings.TrimSpace(h.Get(r.userHeader)); u != "" && len(u) <= maxUserLen && printable(u) {
		return u
	}
	return ""
}

// Client works out everything about req but a token's user: the client's
// address and key, the peer, and, when req presents no token, the user a
// trusted proxy names in the user header (a request that presents one has
// the token's user, once verified, or none). It costs no cryptography.
func (r *Resolver) Client(req *http.Request) Identity {
	return r.ClientOf(ParsePeer(req.RemoteAddr), req.Header)
}

// ClientOf is Client for a request known by its peer's address (as
// ParsePeer gives it) and its header fields, for HTTP engines other than
// net/http.
func (r *Resolver) ClientOf(peer netip.Addr, h Header) Identity {
	return r.ClientOfPeer(peer, "", h)
}

// ClientOfPeer is ClientOf for a caller that keeps peer's text
// (peer.String(), or "" when it has none), as an HTTP engine can once per
// connection: when the client is the peer and its key is that text (an
// IPv4 peer), the key is not formatted again.
func (r *Resolver) ClientOfPeer(peer netip.Addr, peerText string, h Header) Identity {
	var id Identity
	id.Peer = peer
	id.PeerTrusted = id.Peer.IsValid() && r.Trusted(id.Peer)
	id.ClientIP = id.Peer
	var via netip.Addr
	if id.PeerTrusted {
		id.ClientIP, via = clientIP(id.Peer, h, r.header, r.Trusted)
	}
	switch {
	case via.IsValid():
		id.ClientKey = UnknownClientKey(via, r.v6bits)
	case peerText != "" && id.ClientIP == peer && peer.Is4():
		id.ClientKey = peerText
	default:
		id.ClientKey = r.Key(id.ClientIP)
	}
	if r.userHeader != "" && r.TokenOf(h) == "" {
		id.User = r.headerUser(h, id.PeerTrusted)
	}
	return id
}

// Token returns the token req presents, or "" when it has none or no
// tokens are configured.
func (r *Resolver) Token(req *http.Request) string {
	return r.TokenOf(req.Header)
}

// TokenOf is Token for a request known by its header fields.
func (r *Resolver) TokenOf(h Header) string {
	if r.jwt == nil {
		return ""
	}
	return r.jwt.token(h)
}

// CachedUser returns the user of a token verified before and still valid
// at now, without verifying anything.
func (r *Resolver) CachedUser(token string, now time.Time) (string, bool) {
	if r.tokens == nil || token == "" || len(token) > maxToken {
		return "", false
	}
	return r.tokens.get(token, now)
}

// User returns the user of a token at now: from the cache of verified
// tokens, else by verifying it (and keeping it when it verifies). A token
// that does not verify gives a *TokenError, whose Reason says why.
func (r *Resolver) User(token string, now time.Time) (string, error) {
	if r.jwt == nil {
		return "", &TokenError{Reason: ReasonMalformed, err: fmt.Errorf("identity: no token verification is configured")}
	}
	if len(token) <= maxToken {
		if u, ok := r.tokens.get(token, now); ok {
			return u, nil
		}
	}
	u, until, err := r.jwt.verify(token, now)
	if err != nil {
		return "", err
	}
	// The token may be a view of an engine's buffer: the cache keeps a
	// copy of its own.
	r.tokens.put(strings.Clone(token), u, until, now)
	return u, nil
}

// printable reports whether s is valid UTF-8 without control characters.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return false
		}
	}
	return utf8.ValidString(s)
}

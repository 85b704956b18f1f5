package identity

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/floodgate/floodgate/internal/tlsfile"
)

// Defaults of JWTOptions.
const (
	// DefaultLeeway is the clock skew tolerated on exp and nbf.
	DefaultLeeway = 10 * time.Second
	// DefaultJWTHeader is the request header that carries the token, with
	// or without a "Bearer " prefix.
	DefaultJWTHeader = "Authorization"
	// DefaultJWTClaim is the claim that holds the user.
	DefaultJWTClaim = "sub"
)

// minSecret is the shortest HS256 secret accepted, in bytes.
const minSecret = 32

// maxToken bounds the length of a token verified; a longer one fails as
// ReasonTooLong.
const maxToken = 8 << 10

// JWTOptions configures token verification.
type JWTOptions struct {
	// Header carries the token (default Authorization); a "Bearer "
	// prefix is removed.
	Header string
	// Claim holds the user (default sub); its value must be a string.
	Claim string
	// Alg is the one accepted algorithm: HS256, RS256 or ES256. Tokens
	// signed otherwise (or with "none") are rejected.
	Alg string
	// KeyFile holds the HS256 secret (at least 32 bytes; a final newline
	// is ignored) or a PEM public key or certificate (RS256, ES256).
	KeyFile string
	// JWKSFile holds a JSON Web Key Set; tokens choose a key by kid.
	JWKSFile string
	// Key and JWKS give the same material inline instead of a file.
	Key  []byte
	JWKS []byte
	// Issuer and Audience, when set, must match the iss and aud claims.
	Issuer   string
	Audience string
	// Leeway is the skew tolerated on exp and nbf (default 10s).
	Leeway time.Duration
}

// Verifier checks tokens against one algorithm and its keys. It is
// immutable and safe for concurrent use.
type Verifier struct {
	o      JWTOptions
	method jwt.SigningMethod
	keys   map[string]any // by kid; "" holds the only key of a key file
	single any            // the key to use when the token names no kid
}

// ErrNoKey reports a token whose kid names no configured key.
var ErrNoKey = errors.New("identity: no key for the token")

// NewVerifier loads the keys and checks the options.
func NewVerifier(o JWTOptions) (*Verifier, error) {
	if o.Header == "" {
		o.Header = DefaultJWTHeader
	}
	if o.Claim == "" {
		o.Claim = DefaultJWTClaim
	}
	if o.Leeway == 0 {
		o.Leeway = DefaultLeeway
	}
	if o.Leeway < 0 {
		return nil, fmt.Errorf("identity: jwt leeway must not be negative")
	}
	v := &Verifier{o: o, keys: map[string]any{}}
	switch o.Alg {
	case "HS256":
		v.method = jwt.SigningMethodHS256
	case "RS256":
		v.method = jwt.SigningMethodRS256
	case "ES256":
		v.method = jwt.SigningMethodES256
	default:
		return nil, fmt.Errorf("identity: jwt alg must be HS256, RS256 or ES256, got %q", o.Alg)
	}
	keyData, jwksData := o.Key, o.JWKS
	var err error
	if o.KeyFile != "" {
		if keyData, err = tlsfile.Read(o.KeyFile); err != nil {
			return nil, fmt.Errorf("identity: jwt key: %w", err)
		}
	}
	if o.JWKSFile != "" {
		if jwksData, err = tlsfile.Read(o.JWKSFile); err != nil {
			return nil, fmt.Errorf("identity: jwks: %w", err)
		}
	}
	switch {
	case len(keyData) > 0 && len(jwksData) > 0:
		return nil, fmt.Errorf("identity: give either a jwt key or a jwks, not both")
	case len(keyData) > 0:
		k, err := parseKey(o.Alg, keyData)
		if err != nil {
			return nil, err
		}
		v.single = k
	case len(jwksData) > 0:
		if err := v.loadJWKS(jwksData); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("identity: jwt needs a key file or a jwks file")
	}
	return v, nil
}

// parseKey reads a secret (HS256) or a PEM public key (RS256, ES256).
func parseKey(alg string, data []byte) (any, error) {
	if alg == "HS256" {
		secret := bytes.TrimRight(data, "\r\n")
		if len(secret) < minSecret {
			return nil, fmt.Errorf("identity: jwt HS256 secret is %d bytes; use at least %d", len(secret), minSecret)
		}
		return secret, nil
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("identity: jwt key: no PEM block found")
	}
	var pub any
	var err error
	switch block.Type {
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			pub = cert.PublicKey
		}
	case "RSA PUBLIC KEY":
		pub, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "PUBLIC KEY":
		pub, err = x509.ParsePKIXPublicKey(block.Bytes)
	default:
		return nil, fmt.Errorf("identity: jwt key: want a PUBLIC KEY or CERTIFICATE PEM block, got %q", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("identity: jwt key: %w", err)
	}
	if err := keyFits(alg, pub); err != nil {
		return nil, err
	}
	return pub, nil
}

// keyFits checks that a public key is of the kind alg needs.
func keyFits(alg string, pub any) error {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if alg != "RS256" {
			return fmt.Errorf("identity: jwt key is RSA but alg is %s", alg)
		}
		if k.N.BitLen() < 2048 {
			return fmt.Errorf("identity: jwt RSA key has %d bits; use at least 2048", k.N.BitLen())
		}
	case *ecdsa.PublicKey:
		if alg != "ES256" {
			return fmt.Errorf("identity: jwt key is ECDSA but alg is %s", alg)
		}
		if k.Curve != elliptic.P256() {
			return fmt.Errorf("identity: jwt ES256 key must be on P-256")
		}
	default:
		return fmt.Errorf("identity: jwt key of type %T does not fit alg %s", pub, alg)
	}
	return nil
}

// jwk is the part of a JSON Web Key Floodgate reads.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
	K   string `json:"k"`
}

func (v *Verifier) loadJWKS(data []byte) error {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return fmt.Errorf("identity: jwks: %w", err)
	}
	usable := 0
	var last any
	for i, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		if k.Alg != "" && k.Alg != v.o.Alg {
			continue
		}
		key, err := jwkKey(v.o.Alg, k)
		if err != nil {
			return fmt.Errorf("identity: jwks key %d (kid %q): %w", i, k.Kid, err)
		}
		if key == nil {
			continue // another kind of key
		}
		if _, dup := v.keys[k.Kid]; dup {
			return fmt.Errorf("identity: jwks: two keys with kid %q", k.Kid)
		}
		v.keys[k.Kid] = key
		usable++
		last = key
	}
	if usable == 0 {
		return fmt.Errorf("identity: jwks has no key usable with %s", v.o.Alg)
	}
	if usable == 1 {
		v.single = last
	}
	return nil
}

// jwkKey converts a JWK to a key for alg, or nil when its kty does not fit.
func jwkKey(alg string, k jwk) (any, error) {
	b64 := base64.RawURLEncoding
	switch {
	case alg == "HS256" && k.Kty == "oct":
		secret, err := b64.DecodeString(k.K)
		if err != nil {
			return nil, fmt.Errorf("k: %w", err)
		}
		if len(secret) < minSecret {
			return nil, fmt.Errorf("HS256 secret is %d bytes; use at least %d", len(secret), minSecret)
		}
		return secret, nil
	case alg == "RS256" && k.Kty == "RSA":
		n, err1 := b64.DecodeString(k.N)
		e, err2 := b64.DecodeString(k.E)
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		if len(e) == 0 || len(e) > 4 {
			return nil, fmt.Errorf("bad RSA exponent")
		}
		exp := new(big.Int).SetBytes(e).Int64()
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(exp)}
		if exp < 3 || exp%2 == 0 {
			return nil, fmt.Errorf("bad RSA exponent %d", exp)
		}
		return pub, keyFits(alg, pub)
	case alg == "ES256" && k.Kty == "EC":
		if k.Crv != "P-256" {
			return nil, fmt.Errorf("crv must be P-256, got %q", k.Crv)
		}
		x, err1 := b64.DecodeString(k.X)
		y, err2 := b64.DecodeString(k.Y)
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		if len(x) != 32 || len(y) != 32 {
			return nil, fmt.Errorf("P-256 coordinates must be 32 bytes")
		}
		raw := append(append([]byte{4}, x...), y...)
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), raw)
		if err != nil {
			return nil, err
		}
		return pub, nil
	}
	return nil, nil
}

// token takes the token from the configured header. A token longer than
// the 8 KiB verified is still a token presented (it fails as too_long),
// never the absence of one: a client cannot shed its per-user limits, or
// claim a trusted proxy's user header, by padding its token.
func (v *Verifier) token(h Header) string {
	t := strings.TrimSpace(h.Get(v.o.Header))
	if len(t) > 7 && strings.EqualFold(t[:7], "bearer ") {
		t = strings.TrimSpace(t[7:])
	}
	return t
}

// notCompact returns the index of the first byte of token that the JWS
// compact serialization (RFC 7515, section 7.1: base64url segments, without
// padding, joined by dots) has no place for, or -1. The base64 decoder
// skips CR and LF wherever they are, so that a signature with line breaks
// in it would verify as the one without, and any number of tokens would
// stand for one.
func notCompact(token string) int {
	for i := 0; i < len(token); i++ {
		switch c := token[i]; {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return i
		}
	}
	return -1
}

// errCritical reports a token whose header has a crit parameter: it names
// extensions the recipient must understand (RFC 7515, section 4.1.11), and
// Floodgate understands none.
var errCritical = errors.New("identity: token header lists critical extensions (crit), which are not supported")

// Verify checks a token at the current time and returns its user.
func (v *Verifier) Verify(token string) (string, error) {
	return v.VerifyAt(token, time.Now())
}

// VerifyAt checks a token's signature, algorithm, exp (required), nbf, iss
// and aud at now, and returns the user claim. Reason classifies its errors.
// A token is taken only as the JWS compact serialization writes it: a
// segment spelled otherwise in base64url (padded, broken by line ends, or
// with bits set past its last byte) is malformed, so that a valid token
// has one spelling.
func (v *Verifier) VerifyAt(token string, now time.Time) (string, error) {
	u, _, err := v.verify(token, now)
	return u, err
}

// verify is VerifyAt also returning the token's expiry.
func (v *Verifier) verify(token string, now time.Time) (string, time.Time, error) {
	if len(token) > maxToken {
		return "", time.Time{}, &TokenError{Reason: ReasonTooLong, err: fmt.Errorf("identity: token longer than %d bytes", maxToken)}
	}
	if i := notCompact(token); i >= 0 {
		return "", time.Time{}, &TokenError{Reason: ReasonMalformed,
			err: fmt.Errorf("identity: token: byte %d is neither base64url nor a dot", i)}
	}
	opts := []jwt.ParserOption{
		// A segment's last character carries bits past its last byte:
		// they must be zero (RFC 4648, section 3.5), so that a signature
		// is written one way only. Otherwise the signature of a valid
		// token could be rewritten 4 ways (HS256) or 16 (RS256, ES256),
		// each a token of its own to the cache of verified tokens.
		jwt.WithStrictDecoding(),
		jwt.WithValidMethods([]string{v.o.Alg}),
		jwt.WithLeeway(v.o.Leeway),
		jwt.WithTimeFunc(func() time.Time { return now }),
		jwt.WithExpirationRequired(),
	}
	if v.o.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(v.o.Issuer))
	}
	if v.o.Audience != "" {
		opts = append(opts, jwt.WithAudience(v.o.Audience))
	}
	claims := jwt.MapClaims{}
	_, err := jwt.NewParser(opts...).ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		if _, ok := t.Header["crit"]; ok {
			return nil, errCritical
		}
		if t.Method.Alg() != v.method.Alg() {
			return nil, fmt.Errorf("identity: token alg %q is not %s", t.Method.Alg(), v.o.Alg)
		}
		kid, _ := t.Header["kid"].(string)
		if kid == "" {
			if v.single == nil {
				return nil, ErrNoKey
			}
			return v.single, nil
		}
		if k, ok := v.keys[kid]; ok {
			return k, nil
		}
		if len(v.keys) == 0 && v.single != nil {
			return v.single, nil // a key file: kid is informational
		}
		return nil, ErrNoKey
	})
	if err != nil {
		return "", time.Time{}, &TokenError{Reason: reasonOf(err), err: fmt.Errorf("identity: token: %w", err)}
	}
	u, ok := claims[v.o.Claim].(string)
	if !ok || u == "" {
		return "", time.Time{}, &TokenError{Reason: ReasonNoUser, err: fmt.Errorf("identity: token: claim %q is missing or not a string", v.o.Claim)}
	}
	if len(u) > maxUserLen || !printable(u) {
		return "", time.Time{}, &TokenError{Reason: ReasonNoUser, err: fmt.Errorf("identity: token: claim %q is too long or not printable", v.o.Claim)}
	}
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil {
		return "", time.Time{}, &TokenError{Reason: ReasonClaims, err: fmt.Errorf("identity: token: no usable exp")}
	}
	return u, exp.Time.Add(v.o.Leeway), nil
}

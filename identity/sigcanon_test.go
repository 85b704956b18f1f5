package identity

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// TestSignatureWrittenOneWay: a valid token's signature is accepted as
// it was written, and no other way. Before, the decoder took the bits
// past a segment's last byte as they came and skipped CR and LF anywhere:
// the last character of an HS256 signature could be any of 4, of an RS256
// or ES256 signature any of 16, and line breaks could go anywhere in it,
// each spelling a token of its own that verified (a verification each, and
// an entry each in the cache of verified tokens). Padding ('=') was
// already refused, and still is. Each other spelling is now malformed,
// refused before any signature is checked.
func TestSignatureWrittenOneWay(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for _, tc := range []struct {
		alg   string
		m     jwt.SigningMethod
		sign  any
		check []byte
		was   int // the last characters that spell its signature
	}{
		{"HS256", jwt.SigningMethodHS256, k.secret, k.secret, 4},
		{"RS256", jwt.SigningMethodRS256, k.rsa, pemPublic(t, &k.rsa.PublicKey), 16},
		{"ES256", jwt.SigningMethodES256, k.ec, pemPublic(t, &k.ec.PublicKey), 16},
	} {
		t.Run(tc.alg, func(t *testing.T) {
			r, err := NewResolver(Options{JWT: &JWTOptions{Alg: tc.alg, Key: tc.check}})
			if err != nil {
				t.Fatal(err)
			}
			tok := sign(t, tc.m, tc.sign, k.claims(nil), "")
			if u, err := r.User(tok, k.now); u != "parent-42" {
				t.Fatalf("the token as signed: %q, %v", u, err)
			}
			dot := strings.LastIndexByte(tok, '.')
			sig, err := base64.RawURLEncoding.DecodeString(tok[dot+1:])
			if err != nil {
				t.Fatal(err)
			}
			// The other last characters that the lax decoder reads as the
			// same signature: they differ only in the bits past its last
			// byte.
			var others []string
			for _, c := range alphabet {
				v := tok[:len(tok)-1] + string(c)
				if b, err := base64.RawURLEncoding.DecodeString(v[dot+1:]); v != tok && err == nil && bytes.Equal(b, sig) {
					others = append(others, v)
				}
			}
			if len(others) != tc.was-1 {
				t.Fatalf("%d other last characters spell the same signature, want %d", len(others), tc.was-1)
			}
			mid := dot + 10
			others = append(others,
				tok+"=", tok+"==",
				tok[:mid]+"\n"+tok[mid:], tok[:mid]+"\r"+tok[mid:], tok[:mid]+"\r\n"+tok[mid:], tok+"\n")
			accepted := 0
			for _, v := range others {
				u, err := r.User(v, k.now)
				if err == nil {
					accepted++
					t.Errorf("signature %q accepted as %q", v[dot:], u)
					continue
				}
				if Reason(err) != ReasonMalformed {
					t.Errorf("signature %q: %v (reason %s), want malformed", v[dot:], err, Reason(err))
				}
			}
			t.Logf("%s: %d of %d other spellings of the valid signature accepted", tc.alg, accepted, len(others))
			if n := len(r.tokens.m); n != 1 {
				t.Errorf("%d tokens of one signature cached, want 1", n)
			}
		})
	}
}

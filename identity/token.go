package identity

import (
	"errors"

	"github.com/golang-jwt/jwt/v5"
)

// Reasons a presented token gives no user, as TokenError.Reason and in
// metrics. The set is fixed, so a metric labelled with it stays small.
const (
	ReasonMalformed   = "malformed"     // not a JWT
	ReasonTooLong     = "too_long"      // longer than the 8 KiB verified
	ReasonAlgorithm   = "algorithm"     // signed with another algorithm, or "none"
	ReasonUnknownKey  = "unknown_key"   // its kid names no configured key
	ReasonSignature   = "signature"     // the signature does not verify
	ReasonExpired     = "expired"       // past exp (and the leeway)
	ReasonNotYetValid = "not_yet_valid" // before nbf
	ReasonClaims      = "claims"        // exp missing, or wrong iss or aud
	ReasonNoUser      = "no_user"       // the user claim is missing or unusable
	ReasonCritical    = "critical"      // its header lists extensions (crit) that must be understood
)

// TokenError is why a presented token gives no user.
type TokenError struct {
	// Reason is one of the Reason constants.
	Reason string
	err    error
}

// Error returns the verification error.
func (e *TokenError) Error() string { return e.err.Error() }

// Unwrap returns the verification error.
func (e *TokenError) Unwrap() error { return e.err }

// Reason returns the reason of a verification error: a TokenError's
// Reason, else "invalid".
func Reason(err error) string {
	var te *TokenError
	if errors.As(err, &te) {
		return te.Reason
	}
	return "invalid"
}

// reasonOf classifies the parser's errors.
func reasonOf(err error) string {
	switch {
	case errors.Is(err, ErrNoKey):
		return ReasonUnknownKey
	case errors.Is(err, errCritical):
		return ReasonCritical
	case errors.Is(err, jwt.ErrTokenMalformed):
		return ReasonMalformed
	case errors.Is(err, jwt.ErrTokenExpired):
		return ReasonExpired
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return ReasonNotYetValid
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return ReasonSignature
	case errors.Is(err, jwt.ErrTokenInvalidIssuer), errors.Is(err, jwt.ErrTokenInvalidAudience),
		errors.Is(err, jwt.ErrTokenRequiredClaimMissing), errors.Is(err, jwt.ErrTokenInvalidClaims):
		return ReasonClaims
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return ReasonAlgorithm
	}
	return ReasonSignature
}

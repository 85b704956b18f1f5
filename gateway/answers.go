package gateway

import (
	"net/http"

	"github.com/floodgate/floodgate/fields"
)

// Body returns the JSON body of the gateway's own answer with status (429
// is Too Many Requests; a quota's is Limit Exceeded, bodyExceeded), for an
// HTTP engine that answers for the gateway; nil for a status the gateway
// does not answer itself.
func Body(status int) []byte {
	switch status {
	case http.StatusTooManyRequests:
		return bodyTooMany
	case http.StatusForbidden:
		return bodyForbidden
	case http.StatusUnauthorized:
		return bodyUnauthorized
	case http.StatusInternalServerError:
		return bodyInternal
	case http.StatusNotFound:
		return bodyNotFound
	case http.StatusBadGateway:
		return bodyBadGateway
	case http.StatusGatewayTimeout:
		return bodyTimeout
	case http.StatusServiceUnavailable:
		return bodyUnavailable
	}
	return nil
}

// BearerChallenge is the WWW-Authenticate field of the gateway's 401.
const BearerChallenge = `Bearer error="invalid_token"`

// The JSON bodies, as API Gateway writes them.
var (
	bodyTooMany      = []byte(`{"message":"Too Many Requests"}` + "\n")
	bodyExceeded     = []byte(`{"message":"Limit Exceeded"}` + "\n")
	bodyForbidden    = []byte(`{"message":"Forbidden"}` + "\n")
	bodyUnauthorized = []byte(`{"message":"Unauthorized"}` + "\n")
	bodyInternal     = []byte(`{"message":"Internal Server Error"}` + "\n")
	jsonType         = []string{"application/json"}
	bearerChallenge  = []string{BearerChallenge}
)

// canonical field names, so that setting them costs no allocation.
var canonical = map[string]string{
	fields.NamePolicy:          "Ratelimit-Policy",
	fields.NameRateLimit:       "Ratelimit",
	fields.NameRetryAfter:      "Retry-After",
	fields.NameLegacyLimit:     "X-Ratelimit-Limit",
	fields.NameLegacyRemaining: "X-Ratelimit-Remaining",
	fields.NameLegacyReset:     "X-Ratelimit-Reset",
}

// setFields writes fs into h, with one allocation for all the values.
func setFields(h http.Header, fs []fields.Field) {
	if len(fs) == 0 {
		return
	}
	vals := make([]string, len(fs))
	for i, f := range fs {
		name, ok := canonical[f.Name]
		if !ok {
			name = http.CanonicalHeaderKey(f.Name)
		}
		vals[i] = f.Value
		h[name] = vals[i : i+1 : i+1]
	}
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = jsonType
	h["Content-Length"] = []string{fields.Itoa(int64(len(body)))}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

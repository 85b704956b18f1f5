package gateway

import (
	"net/http"

	"github.com/floodgate/floodgate/fields"
)

// The JSON bodies, as API Gateway writes them.
var (
	bodyTooMany      = []byte(`{"message":"Too Many Requests"}` + "\n")
	bodyExceeded     = []byte(`{"message":"Limit Exceeded"}` + "\n")
	bodyForbidden    = []byte(`{"message":"Forbidden"}` + "\n")
	bodyUnauthorized = []byte(`{"message":"Unauthorized"}` + "\n")
	bodyInternal     = []byte(`{"message":"Internal Server Error"}` + "\n")
	jsonType         = []string{"application/json"}
	bearerChallenge  = []string{`Bearer error="invalid_token"`}
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

package app

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/floodgate/floodgate/gateway"
)

// maxExplainBody bounds the body of POST /v1/explain.
const maxExplainBody = 64 << 10

// handleExplain serves POST /v1/explain on the admin listener: the body is
// a gateway.ExplainRequest, the answer the gateway.Explanation of that
// request against the running gateway's policy and store (peeked at,
// nothing charged). The request may hold an API key or a token: it is
// used for the explanation only, never logged. The endpoint takes an
// admin token (server.admin.tokens), as the admin API does, and refuses
// every request while the file lists none.
func (s *server) handleExplain(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/explain", func(w http.ResponseWriter, r *http.Request) {
		// An explanation tells a valid API key from an unknown one, and
		// its plan, without spending the unknown-key limits a guess at the
		// gateway spends: an oracle. It takes an admin token, as the admin
		// API does; a throttle per peer would only slow the guessing, and
		// the admin listener's peers are often one address (loopback, a
		// sidecar, a port-forward), so it would throttle the operator
		// with the guesser. Without tokens, floodgate explain --config
		// answers the same questions off line.
		if !s.console.HasTokens() {
			explainError(w, http.StatusForbidden, "explaining takes an admin token, and server.admin.tokens lists none "+
				"(an explanation tells valid API keys from unknown ones); floodgate explain --config answers without a server")
			return
		}
		if !s.console.Authenticate(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate admin"`)
			explainError(w, http.StatusUnauthorized, "an admin token is required")
			return
		}
		var er gateway.ExplainRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxExplainBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&er); err != nil {
			explainError(w, http.StatusBadRequest, "bad request: "+err.Error())
			return
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			explainError(w, http.StatusBadRequest, "bad request: one JSON object expected")
			return
		}
		g := s.gateway.Load()
		if g == nil {
			explainError(w, http.StatusServiceUnavailable, "not ready")
			return
		}
		req, o, err := er.HTTPRequest(r.Context())
		if err != nil {
			explainError(w, http.StatusBadRequest, err.Error())
			return
		}
		e, err := g.Explain(r.Context(), req, o)
		if err != nil {
			s.log.Error("explain", "err", err)
			explainError(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(e)
	})
}

func explainError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}

package policy

import (
	"net/http"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/fields"
)

// Refusal is a compiled refusal (config.Refusal): how a 429 the gateway
// answers looks.
type Refusal struct {
	// Status is 429 or 503.
	Status int
	// Body is the answer's body; nil keeps the gateway's JSON body.
	Body []byte
	// Fields are the header fields added to the answer: Content-Type
	// first, then the refusal's headers.
	Fields []fields.Field
}

// Forward says what the upstream is told of a request (config.Upstream's
// identity headers and strip_credentials, or a route's).
type Forward struct {
	// KeyName, Plan, User, ClientIP and Remaining are the canonical names
	// of the identity headers ("" for none).
	KeyName, Plan, User, ClientIP, Remaining string
	// Remove lists the header fields removed before the request is
	// forwarded: the identity headers (any copy a client sent) and, with
	// strip_credentials, the API key header and Authorization.
	Remove []string
}

// compileRefusal compiles a validated refusal; nil for nil.
func compileRefusal(r *config.Refusal) *Refusal {
	if r == nil {
		return nil
	}
	out := &Refusal{Status: r.Status}
	if r.Body != "" {
		out.Body = []byte(r.Body)
	}
	if out.Status == 0 {
		out.Status = http.StatusTooManyRequests
	}
	ct := r.ContentType
	if ct == "" {
		ct = "application/json"
	}
	out.Fields = append(out.Fields, fields.Field{Name: "Content-Type", Value: ct})
	for _, h := range r.Headers {
		out.Fields = append(out.Fields, fields.Field{Name: http.CanonicalHeaderKey(h.Name), Value: h.Value})
	}
	return out
}

// compileForward compiles identity headers and strip_credentials; nil when
// they set nothing and strip nothing.
func compileForward(h config.IdentityHeaders, strip bool, apiKeyHeader string) *Forward {
	c := http.CanonicalHeaderKey
	f := &Forward{KeyName: c(h.KeyName), Plan: c(h.Plan), User: c(h.User), ClientIP: c(h.ClientIP), Remaining: c(h.Remaining)}
	for _, n := range h.Names() {
		f.Remove = append(f.Remove, c(n))
	}
	if strip {
		f.Remove = append(f.Remove, c(apiKeyHeader))
		if c(apiKeyHeader) != "Authorization" {
			f.Remove = append(f.Remove, "Authorization")
		}
	}
	if len(f.Remove) == 0 {
		return nil
	}
	return f
}

// gatekeeping compiles the refusals and what the upstream is told, route by
// route and limit by limit.
func (c *compiler) gatekeeping() error {
	f := c.p.file
	s := &f.Server
	c.p.refusal = compileRefusal(s.Refusal)
	for i, rt := range c.p.routes {
		cr := &f.Routes[i]
		rt.Refusal = c.p.refusal
		if cr.Refusal != nil {
			rt.Refusal = compileRefusal(cr.Refusal)
		}
		h, strip := s.Upstream.IdentityHeaders, s.Upstream.StripCredentials
		if cr.IdentityHeaders != nil {
			h = *cr.IdentityHeaders
		}
		if cr.StripCredentials != nil {
			strip = *cr.StripCredentials
		}
		rt.Forward = compileForward(h, strip, s.APIKeyHeader)
	}
	for i := range f.Limits {
		if r := f.Limits[i].Refusal; r != nil {
			if l := c.p.byName[f.Limits[i].Name]; l != nil {
				l.Refusal = compileRefusal(r)
			}
		}
	}
	return nil
}

// Refusal returns the server's refusal (server.refusal), nil for the
// gateway's default answer.
func (p *Policy) Refusal() *Refusal { return p.refusal }

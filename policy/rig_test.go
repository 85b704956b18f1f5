package policy_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/identity"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
)

// clock is a settable clock for memstore.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() int64          { return c.ns.Load() }
func (c *clock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }

// rig decides the requests of a policy through the gateway's admission
// flow (gateway.Gateway.Handle), over a memstore whose clock the test
// sets: it answers as the gateway does, each request it lets through
// answered at once by the upstream with the status the test gives (200 by
// default), whether or not its route names an upstream.
type rig struct {
	t   testing.TB
	g   *gateway.Gateway
	clk *clock
}

// newRig returns a rig of p, its clock at start.
func newRig(t testing.TB, p *policy.Policy, start time.Time) *rig {
	t.Helper()
	return newRigOn(t, gateway.Fixed(p), start)
}

// newRigOn returns a rig of the policies src gives (a *policy.Reloader
// follows its file), its clock at start.
func newRigOn(t testing.TB, src gateway.PolicySource, start time.Time) *rig {
	t.Helper()
	clk := &clock{}
	clk.set(start)
	st, err := memstore.New(memstore.Options{Now: clk.now, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	pm, err := gateway.NewPolicyMatcher(src, gateway.PolicyMatcherOptions{Now: func() time.Time { return time.Unix(0, clk.now()) }})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Options{Matcher: pm, Engine: limiter.New(st, limiter.Options{}),
		MethodOverride: gateway.MethodOverrideOf(src.Policy().Server().MethodOverride)})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, g: g, clk: clk}
}

func compile(t testing.TB, yaml string) *policy.Policy {
	t.Helper()
	f, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("config:\n%v", err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func example(t testing.TB) *policy.Policy {
	t.Helper()
	f, err := config.Load(filepath.Join("..", "examples", "school.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// answer is what the gateway replied.
type answer struct {
	status  int    // the gateway's own answer, or the upstream's
	message string // the message of the gateway's own answer
	binding string // the binding limit of a 429
	user    string // the request's user, as the gateway found it
	res     limiter.Result
}

// do decides one request, as the gateway received it from the client the
// request names (Known), and ends it at once with a 200 from the upstream.
func (r *rig) do(req *policy.Request) answer {
	r.t.Helper()
	return r.doStatus(req, http.StatusOK)
}

// doStatus is do with the upstream answering status: limits counted by
// outcome (count_on) keep their charge only for the statuses they count.
func (r *rig) doStatus(req *policy.Request, status int) answer {
	r.t.Helper()
	return r.send(r.view(req), status)
}

// serve decides an HTTP request as the gateway receives it: the client's
// address, API key and user are worked out from the peer and the header
// fields, as the policy's server settings say.
func (r *rig) serve(hr *http.Request) answer {
	r.t.Helper()
	return r.send(gateway.RequestOf(hr), http.StatusOK)
}

// view returns the gateway's request of req, its identity known.
func (r *rig) view(req *policy.Request) *gateway.Request {
	r.t.Helper()
	v := &gateway.Request{Method: req.Method, Host: req.Host, Path: req.Path, Proto: "HTTP/1.1", Peer: req.ClientIP,
		Known: &gateway.Known{ClientIP: req.ClientIP, UserKnown: true, User: req.User, APIKey: req.APIKey, KeyName: req.KeyName}}
	if req.Header != nil {
		h, ok := req.Header.(identity.Header)
		if !ok {
			r.t.Fatalf("header %T is not an identity.Header", req.Header)
		}
		v.Header = h
	}
	return v
}

// send decides v through the admission flow. A request let through is
// held while it is in flight (concurrency leases, reservations) and ends
// with the upstream's status.
func (r *rig) send(v *gateway.Request, status int) answer {
	r.t.Helper()
	h := r.g.Handle(context.Background(), v, gateway.HandleOptions{Hold: true})
	defer h.Done(status)
	if h.Err != nil {
		r.t.Fatalf("decide: %v", h.Err)
	}
	a := answer{status: h.Status, user: h.Match.User, res: *h.Result}
	a.res.Decisions, a.res.Flags = slices.Clone(a.res.Decisions), slices.Clone(a.res.Flags)
	if h.Forwarded {
		a.status = status
	}
	if len(h.Body) > 0 {
		var body struct{ Message string }
		if err := json.Unmarshal(h.Body, &body); err != nil {
			r.t.Fatalf("answer %d: body %q: %v", h.Status, h.Body, err)
		}
		a.message = body.Message
	}
	if b := h.Result.Binding; a.status == http.StatusTooManyRequests && b >= 0 && b < len(h.Match.Limits) {
		a.binding = h.Match.Limits[b].Name
	}
	return a
}

func (r *rig) statuses(n int, req *policy.Request) string {
	r.t.Helper()
	var out []string
	for range n {
		a := r.do(req)
		out = append(out, strconv.Itoa(a.status))
	}
	return strings.Join(out, " ")
}

// remaining looks at the units left of limit name for the request, through
// the gateway with nothing charged. A look that allows reports what would
// remain after the request, so a limit that allows gives its cost back
// (the engine gives it back already when another limit denies, except to a
// shadow limit).
func (r *rig) remaining(req *policy.Request, name string) int64 {
	r.t.Helper()
	h := r.g.Handle(context.Background(), r.view(req), gateway.HandleOptions{Peek: true})
	defer h.Done(0)
	if h.Err != nil {
		r.t.Fatalf("peek: %v", h.Err)
	}
	for i, l := range h.Match.Limits {
		if l.Name == name {
			d := h.Result.Decisions[i]
			if d.Allowed && (h.Result.Allowed || h.Result.Flags[i]&limiter.Shadow != 0) {
				return d.Remaining + h.Match.Hits[i].Cost
			}
			return d.Remaining
		}
	}
	r.t.Fatalf("limit %s does not apply", name)
	return 0
}

// httpRequest is an HTTP request from peer with the given header fields.
func httpRequest(method, path, peer string, headers map[string]string) *http.Request {
	hr := httptest.NewRequest(method, path, nil)
	hr.RemoteAddr = peer
	for k, v := range headers {
		hr.Header.Set(k, v)
	}
	return hr
}

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

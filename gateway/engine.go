package gateway

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// An HTTP engine other than net/http (the edge engine, package
// gateway/edge) serves its requests through the gateway's one admission
// flow with the few methods of this file: Begin a Flow for a request, fill
// its Request, Run it with the engine's Exchange, and Finish it once its
// answer is written. What the flow decides reaches the engine through the
// Exchange's methods; what the upstream answers reaches the flow through
// the Recorder that Pass is given.

// Begin returns a Flow for a new request, from the gateway's pool; the
// engine fills Flow.Request and hands it to Run, then to Finish.
func (g *Gateway) Begin() *Flow { return g.get() }

// Run takes the request of f through the admission flow, answering it
// through x. It reports that the answer goes on after Run returns (a
// streamed body): the engine then calls Finish when the answer ends;
// otherwise it calls Finish once Run returns (or panics).
func (g *Gateway) Run(x Exchange, f *Flow) (later bool) { return g.handle(x, f) }

// Finish ends f once its answer is written, or its engine gave up on it:
// the reservation is settled, the concurrency leases are given back and the
// access log gets its record. f goes back to the pool: it is not used
// after Finish.
func (g *Gateway) Finish(x Exchange, f *Flow) {
	g.finish(x, f)
	g.put(f)
}

// Request returns the request of f, for its engine to fill before Run.
func (f *Flow) Request() *Request { return &f.view }

// Match returns what the matcher found for f: its route, upstream, hits.
func (f *Flow) Match() *Match { return &f.m }

// Result returns the engine's verdict on f's hits, once the flow decided
// them: an engine whose protocol says when to come back with more
// precision than Retry-After's whole seconds (gRPC's RetryInfo) reads
// Result().RetryAfter when it answers a 429.
func (f *Flow) Result() *limiter.Result { return &f.res }

// WaitInQueue holds f for its place in a leaky queue, delay long; watch
// starts watching for the client to leave (the channel closes when it
// does) and returns the function that ends the watch. It reports false
// when the client left first, and then gives the charge back where the
// engine can. An engine's Exchange.Wait calls it.
func (g *Gateway) WaitInQueue(ctx context.Context, f *Flow, delay time.Duration, watch func() (gone <-chan struct{}, stop func())) bool {
	return g.wait(ctx, f, delay, watch)
}

// Renew keeps the concurrency leases of a request in flight alive until the
// function it returns is called. An engine's Exchange.Keep calls it.
func (g *Gateway) Renew(ctx context.Context, leases []limiter.Hit) (stop func()) {
	return g.renew(ctx, leases)
}

// DecidesWithoutBody reports whether every request can be decided before
// its body is read: its matcher is a BodyReader whose limits read no cost
// from a body. An engine then answers a request that asks for 100 Continue
// before the client sends its body, and a refused one never sends it.
func (g *Gateway) DecidesWithoutBody() bool {
	b, ok := g.matcher.(BodyReader)
	return ok && !b.ReadsBodies()
}

// Logger returns the gateway's logger.
func (g *Gateway) Logger() *slog.Logger { return g.log }

// UpstreamAnswered counts an upstream's answer to a request of route (0:
// the upstream could not be reached), for metrics.
func (g *Gateway) UpstreamAnswered(route string, status int) { g.obs.Upstream(route, status) }

// Upstream returns the upstream settings the gateway was given
// (Options.Upstream), with the drain bounds filled in.
func (g *Gateway) Upstream() TransportOptions {
	o := g.upstream
	o.DrainTimeout, o.DrainBytes = g.drain.wait, g.drain.bytes
	return o
}

// AccessLogged reports whether the gateway writes an access log: an engine
// that rewrites a request in place keeps what the log needs first.
func (g *Gateway) AccessLogged() bool { return g.alog != nil }

// OnForgetUpstreams registers forget, called by ForgetUpstreams: an engine
// that keeps connections to upstreams drops them after a policy reload.
func (g *Gateway) OnForgetUpstreams(forget func()) {
	g.forgetMu.Lock()
	g.forgets = append(g.forgets, forget)
	g.forgetMu.Unlock()
}

// forgetters are the engines' ForgetUpstreams callbacks.
type forgetters struct {
	forgetMu sync.Mutex // guards forgets
	forgets  []func()
}

// forgetAll calls the registered callbacks.
func (f *forgetters) forgetAll() {
	f.forgetMu.Lock()
	fs := f.forgets
	f.forgetMu.Unlock()
	for _, forget := range fs {
		forget()
	}
}

// Header tells the recorder the response's status and header fields: the
// first final status counts (1xx answers are interim).
func (c *Recorder) Header(status int, h Getter) { c.header(status, h) }

// Read looks at a part of the answer's body as it passes.
func (c *Recorder) Read(b []byte) { c.read(b) }

// SetComplete notes that the upstream's answer was read to its end.
func (c *Recorder) SetComplete() { c.complete = true }

// SetNoAnswer notes that no upstream answer began: the upstream could not
// be reached, or failed or timed out before its status line. The
// reservation is then given back.
func (c *Recorder) SetNoAnswer() { c.noAnswer = true }

// SetGone notes that the client left before the answer was written.
func (c *Recorder) SetGone() { c.gone = true }

// ReadsBody reports whether the rest of a successful answer is worth
// reading after the client left: a cost may still come in its body.
func (c *Recorder) ReadsBody() bool { return c.readsBody() }

// SendTimeout is how long one write of an answer may wait for its client
// to take it (Options.SendTimeout); 0 for no bound. An engine that writes
// to clients itself holds its writes to it.
func (g *Gateway) SendTimeout() time.Duration { return g.send }

package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/rawconn"
	"github.com/floodgate/floodgate/internal/tlsfile"
)

// A route's upstreams (the file's upstreams, balance, health and
// upstream_tls) are a Pool: its targets, how requests are spread over
// them, whether each is healthy, and the TLS they are reached with. Both
// engines pick a target per attempt (Pick), report what came of it
// (Done), and try another only when Retry allows. Passive health ejects a
// target after failures in a row (no connection, or a 5xx answer); active
// checks, when the route names a path, ask each target on their own.
// Pools are made from the policy file (Gateway.UseRoutes) and live until
// the next version of it.

// MaxPoolTargets bounds a pool's targets (a request's tried targets are
// the bits of a word).
const MaxPoolTargets = 64

// Target is one target of a pool.
type Target struct {
	// URL is the target's URL (scheme, host and port are what differ
	// within a pool).
	URL  *url.URL
	name string
	bit  uint64

	inflight atomic.Int64 // attempts waiting for an answer's head
	fails    atomic.Int32 // passive failures in a row
	ejected  atomic.Int64 // until when (Unix nanoseconds) passive health keeps it out
	down     atomic.Bool  // active checks took it out

	// The active checks' runs, touched only by the pool's checker.
	passes, misses int
}

// Name is the target's scheme and host, as metrics and logs name it.
func (t *Target) Name() string { return t.name }

// healthy reports whether the target takes requests at now.
func (t *Target) healthy(now int64) bool {
	return !t.down.Load() && t.ejected.Load() <= now
}

// Pool is the upstream pool of a route.
type Pool struct {
	route   string
	targets []*Target
	least   bool
	health  config.Health
	tls     *tls.Config // nil: the gateway's upstream TLS
	tr      http.RoundTripper
	next    atomic.Uint64
	log     logger
	stop    context.CancelFunc
	done    chan struct{}
	ownTr   *http.Transport // closed with the pool
	proxy   *upstreamProxy  // the net/http engine's
	first   *url.URL
	checker *http.Client
	// connWait bounds an attempt's wait for a connection (connWaitTransport).
	connWait time.Duration
}

type logger interface {
	Warn(msg string, args ...any)
	Info(msg string, args ...any)
}

// Route names the pool's route.
func (p *Pool) Route() string { return p.route }

// Targets returns the pool's targets.
func (p *Pool) Targets() []*Target { return p.targets }

// TLS returns the TLS configuration of the pool's https targets, nil for
// the gateway's.
func (p *Pool) TLS() *tls.Config { return p.tls }

// Pick returns the target of the next attempt, among those not tried yet
// (tried holds their bits): a healthy one by the pool's balance, else an
// untried one that is out (better an attempt than no answer), else nil.
func (p *Pool) Pick(tried uint64) *Target {
	n := len(p.targets)
	if n == 1 {
		if tried&1 != 0 {
			return nil
		}
		return p.targets[0]
	}
	now := time.Now().UnixNano()
	start := int(p.next.Add(1) % uint64(n))
	var best, fallback *Target
	for i := range n {
		t := p.targets[(start+i)%n]
		if tried&t.bit != 0 {
			continue
		}
		if !t.healthy(now) {
			if fallback == nil {
				fallback = t
			}
			continue
		}
		if !p.least {
			return t
		}
		if best == nil || t.inflight.Load() < best.inflight.Load() {
			best = t
		}
	}
	if best != nil {
		return best
	}
	return fallback
}

// Start notes an attempt on t (least_requests counts them).
func (p *Pool) Start(t *Target) { t.inflight.Add(1) }

// Done notes what came of an attempt on t: an error (no answer) or the
// answer's status. A failure (no answer, or 5xx) counts towards t's
// passive ejection; anything else clears its count.
func (p *Pool) Done(t *Target, status int, err error) {
	t.inflight.Add(-1)
	if p.health.Failures <= 0 {
		return
	}
	if err == nil && status < 500 {
		if t.fails.Load() != 0 {
			t.fails.Store(0)
		}
		return
	}
	if int(t.fails.Add(1)) >= p.health.Failures {
		t.fails.Store(0)
		t.ejected.Store(time.Now().Add(p.health.Eject).UnixNano())
		if p.log != nil {
			p.log.Warn("gateway: upstream target ejected", "route", p.route, "target", t.name, "for", p.health.Eject, "err", err, "status", status)
		}
	}
}

// Retry reports whether a failed attempt may be made again on another
// target: when nothing of the request was sent (no connection), or when
// the request can be sent again whole (replayable: an idempotent method
// and a body held in full, or none), while untried targets remain.
func (p *Pool) Retry(tried uint64, notSent, replayable bool) bool {
	if !notSent && !replayable {
		return false
	}
	return bits.OnesCount64(tried) < len(p.targets)
}

// Idempotent reports whether a method may be sent twice (RFC 9110 9.2.2).
func Idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// timedOut reports whether err, an attempt's error, is a timeout (its
// answer did not come within the upstream timeout, or no connection came
// free within it).
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// notSent reports whether err says no connection could be made: nothing
// of the request reached the upstream.
func notSent(err error) bool {
	if errors.Is(err, errConnWait) {
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true
	}
	var de *net.DNSError
	return errors.As(err, &de)
}

// NotSent reports whether an upstream error says nothing of the request
// was sent (the connection could not be made): it may go to another
// target whatever it is.
func NotSent(err error) bool { return notSent(err) }

// TargetState is a target's health, for metrics and /readyz.
type TargetState struct {
	Route, Target string
	Healthy       bool
}

// upstreamSet are the pools of one version of the policy file.
type upstreamSet struct {
	byRoute map[string]*Pool
	pools   []*Pool
}

// UseRoutes makes the pools of f's routes (those with upstreams or
// upstream_tls), starts their active health checks, and retires the
// pools of the file before. Call it with each version of the file. A
// target a route's pool had before keeps its health: a new version of the
// file is no pass of a health check, nor the end of an ejection.
func (g *Gateway) UseRoutes(f *config.File) error {
	set := &upstreamSet{byRoute: map[string]*Pool{}}
	prev := g.upstreams.Load()
	var errs []error
	for i := range f.Routes {
		r := &f.Routes[i]
		if r.UpstreamURL == nil || (len(r.UpstreamURLs) == 0 && r.UpstreamTLS.IsZero()) {
			continue
		}
		var was *Pool
		if prev != nil {
			was = prev.byRoute[r.Name]
		}
		p, err := g.newPool(r, was)
		if err != nil {
			errs = append(errs, fmt.Errorf("routes[%d]: %w", i, err))
			continue
		}
		set.byRoute[r.Name] = p
		set.pools = append(set.pools, p)
	}
	old := g.upstreams.Swap(set)
	if old != nil {
		for _, p := range old.pools {
			p.close()
		}
	}
	return errors.Join(errs...)
}

// CloseRoutes stops the pools' health checks and closes their own
// connections.
func (g *Gateway) CloseRoutes() {
	if old := g.upstreams.Swap(nil); old != nil {
		for _, p := range old.pools {
			p.close()
		}
	}
}

// PoolOf returns the pool of route when its upstream is u (the pool's
// first target: a matcher that replaced the upstream, as the demo does,
// gets none), or nil.
func (g *Gateway) PoolOf(route string, u *url.URL) *Pool {
	set := g.upstreams.Load()
	if set == nil {
		return nil
	}
	p := set.byRoute[route]
	if p == nil || p.first != u {
		return nil
	}
	return p
}

// Targets returns the health of every pool's targets.
func (g *Gateway) Targets() []TargetState {
	set := g.upstreams.Load()
	if set == nil {
		return nil
	}
	now := time.Now().UnixNano()
	var out []TargetState
	for _, p := range set.pools {
		if len(p.targets) < 2 && p.health == (config.Health{}) {
			continue // one target reached with TLS settings: no pool to watch
		}
		for _, t := range p.targets {
			out = append(out, TargetState{Route: p.route, Target: t.name, Healthy: t.healthy(now)})
		}
	}
	return out
}

// newPool makes the pool of r.
func (g *Gateway) newPool(r *config.Route, was *Pool) (*Pool, error) {
	p := &Pool{route: r.Name, least: r.Balance == config.BalanceLeastRequests, first: r.UpstreamURL, log: g.log, tr: g.tr, connWait: g.connWait}
	urls := r.UpstreamURLs
	if len(urls) == 0 {
		urls = []*url.URL{r.UpstreamURL}
	} else {
		p.health = r.Health
	}
	if len(urls) > MaxPoolTargets {
		return nil, fmt.Errorf("a pool has at most %d targets, got %d", MaxPoolTargets, len(urls))
	}
	for i, u := range urls {
		p.targets = append(p.targets, &Target{URL: u, name: u.Scheme + "://" + u.Host, bit: 1 << i})
	}
	if !r.UpstreamTLS.IsZero() {
		tc, err := UpstreamTLSConfig(&r.UpstreamTLS)
		if err != nil {
			return nil, fmt.Errorf("upstream_tls: %w", err)
		}
		p.tls = tc
		if base, ok := g.tr.(*http.Transport); ok {
			p.ownTr = base.Clone()
			p.ownTr.TLSClientConfig = tc
			p.tr = p.ownTr
		}
	}
	if was != nil {
		p.keepHealth(was)
	}
	p.proxy = g.newUpstreamProxy(p.first, r.Name)
	p.proxy.rp.Transport = &poolTransport{p: p}
	ctx, cancel := context.WithCancel(context.Background())
	p.stop, p.done = cancel, make(chan struct{})
	if p.health.Path == "" {
		close(p.done)
		return p, nil
	}
	// No Timeout: probe bounds each check itself (checkWait).
	p.checker = &http.Client{Transport: p.tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	go p.check(ctx)
	return p, nil
}

// keepHealth gives p's targets the health of was's targets of the same
// name, before p's checks start: an ejection still running (to p's eject
// time at most, and only while p ejects at all), and a target its active
// checks took out (only while p checks: its checks bring it back). The
// checks' runs of passes and misses are the old checker's own and start
// again.
func (p *Pool) keepHealth(was *Pool) {
	byName := make(map[string]*Target, len(was.targets))
	for _, t := range was.targets {
		byName[t.name] = t
	}
	limit := time.Now().Add(p.health.Eject).UnixNano()
	for _, t := range p.targets {
		o := byName[t.name]
		if o == nil {
			continue
		}
		if p.health.Failures > 0 {
			t.ejected.Store(min(o.ejected.Load(), limit))
			t.fails.Store(o.fails.Load())
		}
		if p.health.Path != "" {
			t.down.Store(o.down.Load())
		}
	}
}

// close stops the pool's checks and closes its own idle connections.
func (p *Pool) close() {
	p.stop()
	<-p.done
	if p.ownTr != nil {
		p.ownTr.CloseIdleConnections()
	}
}

// check runs the active health checks until ctx ends: every interval each
// target is asked GET path, all at once.
func (p *Pool) check(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(p.health.Interval)
	defer t.Stop()
	for {
		var wg sync.WaitGroup
		for _, tg := range p.targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.probe(ctx, tg)
			}()
		}
		wg.Wait()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probe asks one target once and moves its state by the runs. A check
// whose answer has not come at its timeout is a miss only when the target
// has given nothing (checkWait): one whose answer has begun to reach its
// connection, or whose connection the target accepted, is waited for
// while this process takes it up.
func (p *Pool) probe(ctx context.Context, t *Target) {
	u := *t.URL
	u.Path, u.RawPath, u.RawQuery = p.health.Path, "", ""
	w := newCheckWait(ctx, p.health.Timeout, p.health.Interval)
	defer w.stop()
	req, err := http.NewRequestWithContext(w.ctx, http.MethodGet, u.String(), nil)
	ok := false
	if err == nil {
		req.Header.Set("User-Agent", "floodgate-health-check")
		resp, err := p.checker.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			ok = resp.StatusCode >= 200 && resp.StatusCode < 400
		}
	}
	if ctx.Err() != nil {
		return
	}
	if !ok && w.held.Load() {
		// What the target gave waited in this process past the wait's
		// bound: the target answered; this process did not run to take
		// it up. No verdict.
		return
	}
	if ok {
		t.passes, t.misses = t.passes+1, 0
		if t.down.Load() && t.passes >= p.health.Healthy {
			t.down.Store(false)
			p.log.Info("gateway: upstream target healthy again", "route", p.route, "target", t.name)
		}
		return
	}
	t.passes, t.misses = 0, t.misses+1
	if !t.down.Load() && t.misses >= p.health.Unhealthy {
		t.down.Store(true)
		p.log.Warn("gateway: upstream target failed its health check", "route", p.route, "target", t.name, "path", p.health.Path)
	}
}

// checkWait bounds one active health check by its timeout, judged by what
// the target was given and gave rather than by the clock alone: on a busy
// machine (or a process short of CPU) the goroutines that connect, write
// and read a check may wait their turn past the timeout while the timer
// that ends the check does not, and a target that answered at once would
// be taken out. At the timeout a check ends as a miss only when the
// target has had its request for a whole timeout (from when this process
// wrote it) and no byte of its answer has reached the check's connection,
// read or not; or when the check has no connection yet and the target
// has not accepted the one the gateway's transport dials for it, or has
// sent nothing back a whole timeout after its TLS handshake began.
// Otherwise the check is looked at again (at the end of the target's
// timeout, or every quarter of it), up to one interval past the timeout;
// a check still unanswered then ends with no verdict (held) when this
// process holds it up (its request not yet written or not for a whole
// timeout, part of its answer unread, its connection accepted and not yet
// taken up), and as a miss otherwise.
type checkWait struct {
	ctx       context.Context
	cancel    context.CancelFunc
	timer     *time.Timer
	timeout   time.Duration
	every     time.Duration // between two looks past the timeout
	until     time.Time     // the last look
	sock      atomic.Pointer[checkConn]
	dial      atomic.Pointer[syscall.RawConn] // the socket being dialed for the check
	wrote     atomic.Int64                    // when the request was written (Unix nanoseconds; 0: not yet)
	handshake atomic.Int64                    // when its TLS handshake began (Unix nanoseconds; 0: none yet)
	held      atomic.Bool                     // this process held the check up at the last look
}

// checkConn is the connection a check was sent on, and how many bytes its
// socket had received before.
type checkConn struct {
	c    net.Conn
	base uint64
	ok   bool // base was read
}

// checkKey is the context key of a check's checkWait.
type checkKey struct{}

// noteCheckDial is the ControlContext of the transport's dialer: it notes
// the socket dialed for a health check, so that the check's wait can see
// the target accept it before the dial's goroutine does.
func noteCheckDial(ctx context.Context, _, _ string, c syscall.RawConn) error {
	if w, _ := ctx.Value(checkKey{}).(*checkWait); w != nil {
		w.dial.Store(&c)
	}
	return nil
}

// newCheckWait returns the wait of a check made within ctx, with its
// timeout and the checks' interval.
func newCheckWait(ctx context.Context, timeout, interval time.Duration) *checkWait {
	w := &checkWait{timeout: timeout, every: max(timeout/4, time.Millisecond), until: time.Now().Add(timeout + interval)}
	ctx, w.cancel = context.WithCancel(context.WithValue(ctx, checkKey{}, w))
	w.ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			n, ok := rawconn.Received(info.Conn)
			w.sock.Store(&checkConn{c: info.Conn, base: n, ok: ok})
		},
		TLSHandshakeStart: func() { w.handshake.CompareAndSwap(0, time.Now().UnixNano()) },
		WroteRequest:      func(httptrace.WroteRequestInfo) { w.wrote.CompareAndSwap(0, time.Now().UnixNano()) },
	})
	w.timer = time.AfterFunc(time.Hour, w.due) // armed once set: due resets it
	w.timer.Reset(timeout)
	return w
}

// due ends the check, or looks at it again later while this process holds
// it up.
func (w *checkWait) due() {
	now := time.Now()
	next, held := w.look(now)
	if next > 0 && now.Before(w.until) {
		w.timer.Reset(min(next, w.until.Sub(now)))
		return
	}
	w.held.Store(held)
	w.cancel()
}

// look tells when to look at the check again (0: end it now) and whether
// this process holds it up.
func (w *checkWait) look(now time.Time) (next time.Duration, held bool) {
	if s := w.sock.Load(); s != nil {
		unread, _ := rawconn.Unread(s.c)
		got, ok := rawconn.Received(s.c)
		if unread > 0 || s.ok && ok && got > s.base {
			return w.every, unread > 0 // its answer has begun to arrive
		}
		wrote := w.wrote.Load()
		if wrote == 0 {
			return w.every, true // not written yet
		}
		if end := time.Unix(0, wrote).Add(w.timeout); now.Before(end) {
			return end.Sub(now), true // written late: the target has its timeout from then
		}
		return 0, false
	}
	if d := w.dial.Load(); d != nil {
		if accepted, got, _ := rawconn.Connected(*d); accepted {
			hs := w.handshake.Load()
			switch {
			case got > 0 || hs == 0:
				return w.every, true // taking up the TLS handshake's answer, or the connection
			case now.Before(time.Unix(0, hs).Add(w.timeout)):
				return time.Unix(0, hs).Add(w.timeout).Sub(now), true // its handshake began late
			}
			// A whole timeout since its TLS handshake began, and not a
			// byte back.
		}
	}
	return 0, false
}

// stop ends the wait once the check is over.
func (w *checkWait) stop() {
	w.timer.Stop()
	w.cancel()
}

// poolTransport carries the net/http engine's requests of a pool: each
// attempt goes to a target Pick chooses, and a failed one to another when
// Retry allows.
type poolTransport struct{ p *Pool }

func (pt *poolTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := pt.p
	var held *heldBody
	if req.Body != nil && req.Body != http.NoBody {
		// The transport closes a request's body when it fails: held
		// keeps it open for another attempt, and tells whether any of
		// it was read (sent).
		// (The server closes the body itself when the request ends.)
		held = &heldBody{rc: req.Body}
		req.Body = held
	}
	replayable := held == nil && Idempotent(req.Method)
	var tried uint64
	for {
		t := p.Pick(tried)
		if t == nil {
			return nil, errNoTarget
		}
		tried |= t.bit
		req.URL.Scheme, req.URL.Host = t.URL.Scheme, t.URL.Host
		p.Start(t)
		resp, err := connWaitTransport{tr: p.tr, wait: p.connWait}.RoundTrip(req)
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		if err != nil && clientFailed(req, err) {
			// The client's body failed, or the client left: the attempt
			// tells nothing of the target.
			p.Abandoned(t)
			return nil, err
		}
		p.Done(t, status, err)
		if err == nil {
			return resp, nil
		}
		// An attempt that timed out waiting for its answer is not sent
		// again: the target has the request and is slow on it, and each
		// target in turn would be too, one request becoming one per
		// target and its client waiting the timeout once per target.
		if req.Context().Err() != nil || !p.Retry(tried, notSent(err) && (held == nil || !held.read), replayable && !timedOut(err)) {
			return nil, err
		}
		p.log.Warn("gateway: upstream target failed; trying another", "route", p.route, "target", t.name, "err", err)
	}
}

var errNoTarget = errors.New("gateway: no upstream target left to try")

// clientFailed reports whether an attempt at req failed by its client's
// doing: its body could not be read, or it left (its context ended).
func clientFailed(req *http.Request, err error) bool {
	var ce *clientBodyError
	return errors.As(err, &ce) || req.Context().Err() != nil
}

// heldBody is a request body that a failed attempt cannot close.
type heldBody struct {
	rc   io.ReadCloser
	read bool
}

func (b *heldBody) Read(p []byte) (int, error) {
	b.read = true
	return b.rc.Read(p)
}

func (b *heldBody) Close() error { return nil }

// UpstreamTLSConfig returns the client TLS configuration of t: its CAs
// (else the system's), its client certificate and its server name; nil
// when t says nothing.
func UpstreamTLSConfig(t *config.UpstreamTLS) (*tls.Config, error) {
	if t == nil || t.IsZero() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAPath != "" {
		pool, err := tlsfile.CertPool(t.CAPath)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if t.CertPath != "" {
		pair, err := tlsfile.KeyPair(t.CertPath, t.KeyPath)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// Bit returns the bit of t among the pool's tried targets.
func (p *Pool) Bit(t *Target) uint64 { return t.bit }

package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Starting without a Cluster or Sentinel deployment. rueidis makes no
// client of a Cluster whose nodes it cannot reach (it needs their slot
// map) nor of a Sentinel deployment whose sentinels it cannot reach (they
// name the primary). A store started then talks through a lazyClient: it
// answers every command at once with an error until the real client is
// made, which it tries in the background with a growing back-off, then
// passes everything to the real client. Store.Client hands out the
// lazyClient, so that what a program keeps beside its counters sees
// errors while Redis does not answer, and Redis once it does, without
// being made again.

// Back-off of the attempts to make the client.
const (
	firstAttempt  = 100 * time.Millisecond // the wait before the first one
	maxAttemptGap = 2 * time.Second        // the longest wait between two
)

// anySlot is the slot of a command without keys built for a Cluster
// client (rueidis sends it to any node); a slot above it was computed by a
// builder that checks no slots, which a Cluster client cannot route.
const anySlot = 1 << 14

// errBuiltBefore answers a command built before the client was made and
// sent after, to a Cluster client.
var errBuiltBefore = errors.New("redisstore: a command built before the connection to the Cluster cannot be routed; build it again with B()")

// lazyClient is a rueidis.Client of a deployment that did not answer when
// the store was made: it answers every call with an error (why) until
// connect has made the real client, then is that client.
type lazyClient struct {
	mode    rueidis.ClientMode // Mode until the client is made
	hosts   []string           // Nodes until the client is made: the URL's
	builder rueidis.Builder    // B until the client is made: a builder that checks no slots
	cur     atomic.Pointer[madeClient]
	why     atomic.Pointer[error] // why there is no client yet

	mu      sync.Mutex // guards closed and started
	closed  bool
	started bool
	stop    chan struct{}   // closed by Close
	done    chan struct{}   // closed when the connecting goroutine has ended
	ctx     context.Context // ends at Close, and with it the dials of an attempt under way
	cancel  context.CancelFunc
	once    sync.Once // stops the attempts once

	tmu     sync.Mutex    // guards tracked
	tracked []func() bool // each stops closing one connection of the attempt under way at Close
}

// madeClient is the real client, once made.
type madeClient struct {
	rueidis.Client
	cluster bool // a Cluster client, which routes commands by their slots
}

// stale reports whether a command of slot sl was built by the lazyClient's
// builder, which a Cluster client cannot route.
func (m *madeClient) stale(sl uint16) bool { return m.cluster && sl > anySlot }

// newLazyClient returns a client that answers every call with an error
// wrapping err (why the deployment at hosts could not be reached) until
// its connect has made the real client, as a client of mode would be.
func newLazyClient(mode rueidis.ClientMode, hosts []string, err error) (*lazyClient, error) {
	b, berr := plainBuilder()
	if berr != nil {
		return nil, berr
	}
	l := &lazyClient{mode: mode, hosts: hosts, builder: b, stop: make(chan struct{}), done: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.setWhy(err)
	return l, nil
}

// errNoDial is what the dialer of plainBuilder's client answers.
var errNoDial = errors.New("redisstore: no dial")

// plainBuilder returns rueidis' builder of commands for one server, which
// checks no slots. rueidis makes builders only with clients: this one is
// made with a dialer that fails at once, and closed.
func plainBuilder() (rueidis.Builder, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{"127.0.0.1:6379"},
		ForceSingleClient: true,
		DisableCache:      true,
		DisableRetry:      true,
		DialCtxFn: func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
			return nil, errNoDial
		},
	})
	if c == nil {
		return rueidis.Builder{}, fmt.Errorf("redisstore: command builder: %w", err)
	}
	defer c.Close()
	return c.B(), nil
}

// setWhy keeps err as the reason there is no client yet.
func (l *lazyClient) setWhy(err error) {
	e := fmt.Errorf("redisstore: Redis does not answer yet: %w", err)
	if !unreachable(err) {
		e = fmt.Errorf("redisstore: no connection to Redis yet: %w", err)
	}
	l.why.Store(&e)
}

// err is what a call answers while there is no client.
func (l *lazyClient) err() error {
	select {
	case <-l.stop:
		return rueidis.ErrClosing
	default:
	}
	return *l.why.Load()
}

// dial returns a dialer that dials as next does, and stops dialing when
// the client is closed. A connection dialed for an attempt to make the
// client is closed then too, so that Close does not wait for the
// handshake of a server that accepts and does not answer (a paused one).
func (l *lazyClient) dial(next func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error)) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	return func(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(l.ctx, cancel)
		defer stop()
		conn, err := next(ctx, dst, d, cfg)
		if err != nil || l.cur.Load() != nil {
			return conn, err
		}
		l.tmu.Lock()
		l.tracked = append(l.tracked, context.AfterFunc(l.ctx, func() { conn.Close() }))
		l.tmu.Unlock()
		return conn, nil
	}
}

// untrack stops closing the connections of the attempt that just ended at
// Close: they were closed with the attempt, or belong to the client it
// made.
func (l *lazyClient) untrack() {
	l.tmu.Lock()
	defer l.tmu.Unlock()
	for _, stop := range l.tracked {
		stop()
	}
	clear(l.tracked)
	l.tracked = l.tracked[:0]
}

// connect tries to make the client with makeClient, after firstAttempt,
// then with waits that double up to maxAttemptGap, until it is made or the
// lazyClient is closed. Once made, the lazyClient answers through it and
// ready is called. It logs at Warn what fails an attempt when that is not
// a deployment that cannot be reached (a password refused once the
// servers answer, say), once each time it changes.
func (l *lazyClient) connect(makeClient func() (rueidis.Client, error), ready func(), log *slog.Logger) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.started {
		return
	}
	l.started = true
	go l.attempts(makeClient, ready, log)
}

// attempts is connect's goroutine.
func (l *lazyClient) attempts(makeClient func() (rueidis.Client, error), ready func(), log *slog.Logger) {
	defer close(l.done)
	wait := firstAttempt
	t := time.NewTimer(wait)
	defer t.Stop()
	logged := ""
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		c, err := makeClient()
		l.untrack()
		if err == nil {
			l.mu.Lock()
			closed := l.closed
			if !closed {
				l.cur.Store(&madeClient{Client: c, cluster: c.Mode() == rueidis.ClientModeCluster})
			}
			l.mu.Unlock()
			if closed {
				c.Close()
				return
			}
			ready()
			return
		}
		if c != nil {
			c.Close()
		}
		l.setWhy(err)
		if msg := err.Error(); !unreachable(err) && msg != logged {
			logged = msg
			log.Warn("redisstore: Redis answers but the client cannot be made yet; trying again", "err", err)
		}
		wait = min(2*wait, maxAttemptGap)
		t.Reset(wait - rand.N(wait/4)) // spread the attempts of processes that started together
	}
}

// stopConnecting stops the attempts to make the client and waits for the
// one under way, whose dials end at once.
func (l *lazyClient) stopConnecting() {
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		started := l.started
		l.mu.Unlock()
		close(l.stop)
		l.cancel()
		if started {
			<-l.done
		}
	})
}

// B returns the real client's builder, or one that checks no slots.
func (l *lazyClient) B() rueidis.Builder {
	if m := l.cur.Load(); m != nil {
		return m.B()
	}
	return l.builder
}

// client returns the real client, or the error a call answers while
// there is none.
func (l *lazyClient) client() (*madeClient, error) {
	if m := l.cur.Load(); m != nil {
		return m, nil
	}
	return nil, l.err()
}

// check returns the real client for n commands whose slots slot gives, or
// the error each of them answers: there is no client yet, or one of them
// was built before it was made and it cannot route them. It allocates
// nothing: it is on every call once the client is made.
func (l *lazyClient) check(n int, slot func(i int) uint16) (*madeClient, error) {
	m, err := l.client()
	if err != nil {
		return nil, err
	}
	for i := range n {
		if m.stale(slot(i)) {
			return nil, errBuiltBefore
		}
	}
	return m, nil
}

// Do sends cmd through the real client, or answers an error at once.
func (l *lazyClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	m, err := l.check(1, func(int) uint16 { return cmd.Slot() })
	if err != nil {
		return rueidis.NewErrorResult(err)
	}
	return m.Do(ctx, cmd)
}

// DoMulti sends the commands through the real client, or answers an
// error for each at once.
func (l *lazyClient) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	m, err := l.check(len(multi), func(i int) uint16 { return multi[i].Slot() })
	if err != nil {
		return errorResults(len(multi), err)
	}
	return m.DoMulti(ctx, multi...)
}

// DoCache is Do's for a cacheable command.
func (l *lazyClient) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	m, err := l.check(1, func(int) uint16 { return cmd.Slot() })
	if err != nil {
		return rueidis.NewErrorResult(err)
	}
	return m.DoCache(ctx, cmd, ttl)
}

// DoMultiCache is DoMulti's for cacheable commands.
func (l *lazyClient) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	m, err := l.check(len(multi), func(i int) uint16 { return multi[i].Cmd.Slot() })
	if err != nil {
		return errorResults(len(multi), err)
	}
	return m.DoMultiCache(ctx, multi...)
}

// DoStream is Do's, streamed.
func (l *lazyClient) DoStream(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResultStream {
	m, err := l.check(1, func(int) uint16 { return cmd.Slot() })
	if err != nil {
		return rueidis.NewErrorResultStream(err)
	}
	return m.DoStream(ctx, cmd)
}

// DoMultiStream is DoMulti's, streamed.
func (l *lazyClient) DoMultiStream(ctx context.Context, multi ...rueidis.Completed) rueidis.MultiRedisResultStream {
	m, err := l.check(len(multi), func(i int) uint16 { return multi[i].Slot() })
	if err != nil {
		return rueidis.NewErrorResultStream(err)
	}
	return m.DoMultiStream(ctx, multi...)
}

// Receive subscribes through the real client, or returns an error at
// once.
func (l *lazyClient) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(msg rueidis.PubSubMessage)) error {
	m, err := l.check(1, func(int) uint16 { return subscribe.Slot() })
	if err != nil {
		return err
	}
	return m.Receive(ctx, subscribe, fn)
}

// Dedicated calls fn with a connection of the real client, or returns an
// error at once without calling it.
func (l *lazyClient) Dedicated(fn func(rueidis.DedicatedClient) error) error {
	if m := l.cur.Load(); m != nil {
		return m.Dedicated(fn)
	}
	return l.err()
}

// Dedicate returns a connection of the real client, or one that answers
// every call with an error.
func (l *lazyClient) Dedicate() (rueidis.DedicatedClient, func()) {
	if m := l.cur.Load(); m != nil {
		return m.Dedicate()
	}
	return downDedicated{b: l.builder, err: l.err()}, func() {}
}

// Nodes returns the real client's nodes; until it is made, the addresses
// of the URL (a Cluster's seed nodes, the sentinels), each answering as
// the lazyClient does, so that what asks every node (the eviction check)
// learns that it cannot tell rather than that there is nothing to check.
func (l *lazyClient) Nodes() map[string]rueidis.Client {
	if m := l.cur.Load(); m != nil {
		return m.Nodes()
	}
	nodes := make(map[string]rueidis.Client, len(l.hosts))
	for _, h := range l.hosts {
		nodes[h] = l
	}
	return nodes
}

// Mode returns the real client's mode, or the deployment's.
func (l *lazyClient) Mode() rueidis.ClientMode {
	if m := l.cur.Load(); m != nil {
		return m.Mode()
	}
	return l.mode
}

// Close stops the attempts to make the client and closes it if it was
// made; later calls answer rueidis.ErrClosing.
func (l *lazyClient) Close() {
	l.stopConnecting()
	if m := l.cur.Load(); m != nil {
		m.Close()
	}
}

var _ rueidis.Client = (*lazyClient)(nil)

// errorResults returns n results of err.
func errorResults(n int, err error) []rueidis.RedisResult {
	out := make([]rueidis.RedisResult, n)
	for i := range out {
		out[i] = rueidis.NewErrorResult(err)
	}
	return out
}

// downDedicated is the dedicated connection of a client not made yet: it
// answers every call with err.
type downDedicated struct {
	b   rueidis.Builder
	err error
}

// B returns the lazyClient's builder.
func (d downDedicated) B() rueidis.Builder { return d.b }

// Do answers err.
func (d downDedicated) Do(context.Context, rueidis.Completed) rueidis.RedisResult {
	return rueidis.NewErrorResult(d.err)
}

// DoMulti answers err for each command.
func (d downDedicated) DoMulti(_ context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	return errorResults(len(multi), d.err)
}

// Receive returns err.
func (d downDedicated) Receive(context.Context, rueidis.Completed, func(rueidis.PubSubMessage)) error {
	return d.err
}

// SetPubSubHooks returns a channel that says at once that the hooks will
// not be called (nil for empty hooks, as rueidis does).
func (d downDedicated) SetPubSubHooks(hooks rueidis.PubSubHooks) <-chan error {
	if hooks.OnMessage == nil && hooks.OnSubscription == nil {
		return nil
	}
	return d.ended()
}

// SetOnInvalidations returns a channel that says at once that fn will not
// be called (nil for no fn).
func (d downDedicated) SetOnInvalidations(fn func([]rueidis.RedisMessage)) <-chan error {
	if fn == nil {
		return nil
	}
	return d.ended()
}

// ended returns a closed channel that holds err.
func (d downDedicated) ended() <-chan error {
	ch := make(chan error, 1)
	ch <- d.err
	close(ch)
	return ch
}

// Close does nothing: there is no connection.
func (d downDedicated) Close() {}

package redisstore

import (
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/lograte"
	"github.com/floodgate/floodgate/limiter"
	"github.com/redis/rueidis"
)

//go:embed apply.lua
var applySource string

//go:embed refund.lua
var refundSource string

// Options configure a Store. The zero value talks to redis://127.0.0.1:6379.
type Options struct {
	// URL names the Redis deployment; see ParseURL. Default
	// redis://127.0.0.1:6379.
	URL string
	// Prefix starts every key. Default "fg:".
	Prefix string
	// DialTimeout bounds connecting. Default 1s.
	DialTimeout time.Duration
	// Network, "tcp4" or "tcp6", dials Redis over TCP with that family of
	// addresses only, as net.Dial does with that network: a host name's
	// addresses of the other are not tried, and an address of the other
	// fails (any other value: either).
	Network string
	// WriteTimeout bounds writing to a connection and detects dead ones.
	// Default 1s. The deadline of each decision comes from its context.
	WriteTimeout time.Duration
	// TLSConfig is used by the rediss schemes (default: system roots).
	// Given with a plain scheme (redis, redis+cluster, redis+sentinel,
	// redis+unix), New refuses it rather than talk without TLS.
	TLSConfig *tls.Config
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// (the URL's credentials are for Redis itself).
	SentinelUsername, SentinelPassword string
	// PipelineMultiplex spreads the automatic pipeline over 2^n
	// connections per node. Zero or negative: one connection per node.
	// Redis runs commands on one thread, so one connection gathers the
	// most commands into each write and read, on both sides; more help
	// only when one reading goroutine on this side cannot keep up.
	PipelineMultiplex int
	// MaxFlushDelay lets the automatic pipeline wait up to this long to
	// gather more commands into one write when several callers are
	// waiting: fewer system calls on both sides, for at most this much
	// latency (0: none when batching, else DefaultMaxFlushDelay; negative:
	// write at once). A lone caller never waits. Batching gathers
	// requests better (into one script call), and a Go timer below a
	// millisecond often sleeps for a whole one.
	MaxFlushDelay time.Duration
	// MaxBatch is the most requests one script call decides (0:
	// DefaultMaxBatch; 1 or negative: one script call per request, no
	// batching). See the package documentation.
	MaxBatch int
	// BatchesInFlight is how many script calls of one lane (the server,
	// or one Cluster slot) may be in flight at once (0:
	// DefaultBatchesInFlight). Beside a call in flight, a further one goes
	// once MaxBatch/8 requests, and no fewer than the calls in flight
	// carry, wait for it (or for a second lone caller);
	// the requests that arrive meanwhile wait and go together in the next
	// call. See the package documentation.
	BatchesInFlight int
	// EvictionCheck is how often the store checks that Redis cannot evict
	// its keys (see Eviction): New checks at once, then every
	// EvictionCheck (0: DefaultEvictionCheck; negative: never). A Redis
	// that may evict them is logged as a warning.
	EvictionCheck time.Duration
	// RefuseEvictable makes New fail with ErrEvictable when a server may
	// evict the limiter's keys (a check that cannot tell only warns).
	RefuseEvictable bool
	// Logger receives connection problems (a server answering as a
	// replica among them), refund failures and eviction warnings.
	// Default: discard.
	Logger *slog.Logger
}

// DefaultMaxFlushDelay is the default of Options.MaxFlushDelay.
const DefaultMaxFlushDelay = 100 * time.Microsecond

// Store is a limiter.Store kept in Redis. It is safe for concurrent use;
// many goroutines share a few connections through rueidis' automatic
// pipelining.
type Store struct {
	client rueidis.Client
	mode   Mode
	prefix string
	log    *slog.Logger
	apply  *rueidis.Lua
	refund *rueidis.Lua

	maxBatch  int
	inFlight  int
	single    lane                   // the lane of a standalone server
	slotLanes []atomic.Pointer[lane] // a Cluster's lanes, by slot
	batches   sync.WaitGroup         // goroutines sending batches

	calls   atomic.Int64 // script calls of apply.lua
	decided atomic.Int64 // requests they decided

	// testNow, when not zero, replaces the server's clock (µs); tests use
	// it to compare decisions at fixed instants.
	testNow atomic.Int64

	refundErrors atomic.Int64
	refunds      sync.WaitGroup // refunds in flight
	refunding    atomic.Int64   // refunds in flight (maxRefunds)
	// refundsDropped holds back the lines about refunds not sent past
	// maxRefunds.
	refundsDropped lograte.Gate

	replies *replies // nil: the connections are the caller's (NewFromClient)
	// looked, when set (in tests), runs after each look at the reply
	// clock of a call bounded by ProgressContext.
	looked atomic.Pointer[func()]

	// lazy, when not nil, is client: the client of a Cluster or Sentinel
	// deployment that did not answer when New ran, made in the background.
	lazy *lazyClient

	evict evictionCheck

	replicaLog lograte.Gate // the warning of replicaAnswered

	closeOnce sync.Once // Close runs once
}

// New connects to the Redis named by opts.URL. A deployment that cannot
// be reached yet does not fail it: the store's calls fail at once (and
// each limit's failure policy decides) until Redis answers (startsWithout
// says when New fails all the same). A standalone server's client dials
// again at its next command; a Cluster's or a Sentinel deployment's
// client, which rueidis makes only once their servers answer, is made in
// the background, with waits that grow from 100 ms to 2 s, until it is
// made or the store is closed (see Client).
func New(opts Options) (*Store, error) {
	if opts.URL == "" {
		opts.URL = "redis://127.0.0.1:6379"
	}
	addr, err := ParseURL(opts.URL)
	if err != nil {
		return nil, err
	}
	if opts.TLSConfig != nil && !addr.TLS {
		scheme, _, _ := strings.Cut(opts.URL, "://")
		return nil, fmt.Errorf("redisstore: a TLS configuration was given for a %s:// URL, which speaks without TLS: use the rediss form of the scheme (Redis serves TLS over TCP only, so not with redis+unix)", scheme)
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = time.Second
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = time.Second
	}
	co := addr.clientOption(&opts)
	rp := newReplies(addr)
	if rp.network == "tcp" && (opts.Network == "tcp4" || opts.Network == "tcp6") {
		rp.network = opts.Network
	}
	co.DialCtxFn = rp.dial
	co.Sentinel.Dialer.Resolver = rp.sentinel
	c, err := rueidis.NewClient(co)
	var down error // why the deployment could not be reached
	var lazy *lazyClient
	if err != nil {
		if !startsWithout(opts, err) {
			if c != nil {
				c.Close()
			}
			return nil, fmt.Errorf("redisstore: connect %s: %w", redact(opts.URL), err)
		}
		down = err
		if c == nil {
			// A Cluster or Sentinel deployment: its client is made
			// once its servers answer.
			mode := rueidis.ClientModeStandalone
			switch addr.Mode {
			case Cluster:
				mode = rueidis.ClientModeCluster
			case Sentinel:
				mode = rueidis.ClientModeSentinel
			}
			if lazy, err = newLazyClient(mode, addr.Hosts, down); err != nil {
				return nil, err
			}
			c = lazy
		}
	}
	mode := addr.Mode
	if c.Mode() == rueidis.ClientModeCluster {
		mode = Cluster
	}
	s := newStore(c, mode, opts)
	s.lazy = lazy
	if down != nil {
		s.log.Warn("redisstore: Redis does not answer yet: every decision follows its limit's failure policy until it does",
			"url", redact(opts.URL), "err", down)
	}
	if rp.cluster == (mode == Cluster) {
		rp.client, rp.log = c, s.log
		s.replies = rp
		if rp.cluster && lazy == nil {
			rp.readSlots()
		}
	}
	if lazy != nil {
		co.DialCtxFn = lazy.dial(rp.dial)
		lazy.connect(func() (rueidis.Client, error) { return rueidis.NewClient(co) }, func() {
			if s.replies != nil && s.replies.cluster {
				s.replies.readSlots()
			}
			if opts.EvictionCheck >= 0 {
				s.startEvictionWatch(opts.EvictionCheck, true)
			}
			s.log.Info("redisstore: Redis answers: decisions are Redis' from now on", "url", redact(opts.URL))
		}, s.log)
		return s, nil
	}
	if opts.EvictionCheck >= 0 {
		ctx, cancel := context.WithTimeout(context.Background(), opts.DialTimeout+time.Second)
		e := s.CheckEviction(ctx)
		cancel()
		if e.Evictable && opts.RefuseEvictable {
			c.Close()
			return nil, fmt.Errorf("%w: %s has maxmemory-policy %s with maxmemory %d", ErrEvictable, e.Node, e.Policy, e.MaxMemory)
		}
		s.startEvictionWatch(opts.EvictionCheck, false)
	}
	return s, nil
}

// startsWithout reports whether New starts a store on a deployment that
// did not answer its first connection with err: one that could not be
// reached (refused, timed out, a name not found yet), standalone, Cluster
// or Sentinel alike. Each decision then follows its limit's failure policy
// until Redis answers, so that a process started during an outage (a
// restart, a new replica) serves by its policies rather than not at all.
// Not so for a server that answered with an error (a password refused), a
// TLS handshake that failed, nor a store that must check the servers'
// eviction settings before it starts (Options.RefuseEvictable).
func startsWithout(opts Options, err error) bool {
	if opts.RefuseEvictable {
		return false
	}
	return unreachable(err)
}

// unreachable reports whether err says that Redis could not be reached
// (a dial refused or timed out, a name not found, a connection closed
// before it answered: a Redis holding maxclients connections already says
// "max number of clients reached" and closes it, as a proxy in front of a
// Redis that is down closes it), rather than that it answered with an
// error.
func unreachable(err error) bool {
	var re *rueidis.RedisError
	if errors.As(err, &re) {
		return strings.HasPrefix(re.Error(), "ERR max number of clients reached")
	}
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &op) && op.Op == "dial" || errors.As(err, &dns) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// NewFromClient wraps a rueidis client that the caller made. The store
// takes it over: Close closes it, after which the store answers every call
// with an error.
// It checks Redis' eviction settings in the background (RefuseEvictable
// does not apply: call CheckEviction to refuse).
func NewFromClient(c rueidis.Client, opts Options) *Store {
	mode := Standalone
	if c.Mode() == rueidis.ClientModeCluster {
		mode = Cluster
	}
	s := newStore(c, mode, opts)
	if opts.EvictionCheck >= 0 {
		s.startEvictionWatch(opts.EvictionCheck, true)
	}
	return s
}

// startEvictionWatch starts checking the eviction settings every interval
// (0: DefaultEvictionCheck), at once too when now is set.
func (s *Store) startEvictionWatch(every time.Duration, now bool) {
	if every == 0 {
		every = DefaultEvictionCheck
	}
	s.evict.stop, s.evict.done = make(chan struct{}), make(chan struct{})
	go s.watchEviction(every, now)
}

func newStore(c rueidis.Client, mode Mode, opts Options) *Store {
	if opts.Prefix == "" {
		opts.Prefix = "fg:"
	}
	lg := opts.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		client:   c,
		mode:     mode,
		prefix:   opts.Prefix,
		log:      lg,
		apply:    rueidis.NewLuaScript(applySource),
		refund:   rueidis.NewLuaScript(refundSource),
		maxBatch: opts.MaxBatch,
		inFlight: opts.BatchesInFlight,
	}
	if s.maxBatch == 0 {
		s.maxBatch = DefaultMaxBatch
	}
	if s.inFlight <= 0 {
		s.inFlight = DefaultBatchesInFlight
	}
	if mode == Cluster {
		s.slotLanes = make([]atomic.Pointer[lane], 16384)
	}
	return s
}

// Mode reports whether the store talks to a standalone server (or a
// Sentinel-managed primary) or to a Cluster.
func (s *Store) Mode() Mode { return s.mode }

// Close waits for refunds and batches in flight and closes the
// connections. It stops making the client of a deployment that has not
// answered yet (see New), and waits for an attempt under way, whose dials
// it ends. Closing a closed store does nothing; a closed store answers
// every call with an error.
func (s *Store) Close() { s.closeOnce.Do(s.close) }

// close is Close, run once.
func (s *Store) close() {
	if s.lazy != nil {
		// After this, the eviction watch (started once the client is
		// made) is started or never will be.
		s.lazy.stopConnecting()
	}
	if s.evict.stop != nil {
		close(s.evict.stop)
		<-s.evict.done
	}
	s.refunds.Wait()
	s.batches.Wait()
	if s.replies != nil {
		s.replies.close()
	}
	s.client.Close()
}

// RefundErrors counts refunds (Cluster only) that failed, leaving a charge
// in place until its key's window passes or its TTL expires, or that got
// no answer within 10 seconds (which Redis applies if they reached it).
func (s *Store) RefundErrors() int64 { return s.refundErrors.Load() }

// Key returns the Redis key of a rule's counter for a subject:
// <prefix>{<subject>}:<rule id>. The hash tag keeps all limits of one
// subject in one Cluster slot. A subject that would leave the tag empty
// (an empty one, or one that starts with '}') makes Redis hash the whole
// key instead, so that the counter's other keys (a log's or a
// concurrency limit's hash, a settle record) would fall in other slots:
// such a subject is written <prefix>#{#}<subject>:<rule id>, which no
// other subject's key can be (those have '{' after the prefix).
func (s *Store) Key(r *limiter.Rule, subject string) string {
	if subject == "" || subject[0] == '}' {
		return s.prefix + "#{#}" + subject + ":" + r.ID()
	}
	return s.prefix + "{" + subject + "}:" + r.ID()
}

// argsSlot keeps each rule's script arguments (a *ruleArgs) on the rule.
var argsSlot = limiter.NewSlot()

func buildRuleArgs(r *limiter.Rule) any { return newRuleArgs(r) }

// ruleArgs returns the script arguments of a rule, prepared once, on it.
func (s *Store) ruleArgs(r *limiter.Rule) *ruleArgs {
	return r.Prepared(argsSlot, buildRuleArgs).(*ruleArgs)
}

// scriptOp is what the store does with a request's hits: a verb of
// limiter.Store or of one of the optional interfaces.
type scriptOp uint8

const (
	opCharge scriptOp = iota + 1
	opPeek
	opRelease
	opRefund
	opReserve
	opSettle
)

// Decide decides the hits, and unless peek charges them all or nothing
// (see limiter.Store). Hits in one Cluster slot (always, on a standalone
// server) are decided by one script call, all or nothing, together with
// the other requests that arrive meanwhile (see the package documentation
// on batching). On a Cluster, slots are charged one after the other and
// the charged ones are refunded when a later slot denies (see the package
// documentation for the bound on over-counting this gives).
//
// A hit whose cost exceeds its limit's capacity denies the request and
// makes Decide return an error wrapping floodgate.ErrNeverFits, with out
// filled in. A request whose context ends while it still waits for its
// batch to be sent returns an error wrapping limiter.ErrNotSent: it was
// not applied; so do the other verbs.
func (s *Store) Decide(ctx context.Context, hits []limiter.Hit, peek bool, out []floodgate.Decision) error {
	o := opCharge
	if peek {
		o = opPeek
	}
	return s.do(ctx, o, hits, out, nil)
}

// Release ends the concurrency leases the hits name (limiter.Releaser),
// one request per hit (releases are independent).
func (s *Store) Release(ctx context.Context, hits []limiter.Hit) error {
	return s.do(ctx, opRelease, hits, nil, nil)
}

// Refund gives back the charges of the refundable hits
// (limiter.Refunder).
func (s *Store) Refund(ctx context.Context, hits []limiter.Hit) error {
	return s.do(ctx, opRefund, hits, nil, nil)
}

// Reserve is Decide's charge that also writes the settle records of its
// reserved hits in the same call (limiter.Reserver); on a Cluster, a
// refund of a slot after a later slot denied deletes them again.
func (s *Store) Reserve(ctx context.Context, hits []limiter.Hit, out []floodgate.Decision) error {
	return s.do(ctx, opReserve, hits, out, nil)
}

// Settle ends the reservations the hits name (limiter.Reserver), per
// slot, each hit on its own (see the package documentation on
// reservations).
func (s *Store) Settle(ctx context.Context, hits []limiter.Hit, out []limiter.Settled) error {
	return s.do(ctx, opSettle, hits, nil, out)
}

var (
	_ limiter.Releaser = (*Store)(nil)
	_ limiter.Refunder = (*Store)(nil)
	_ limiter.Reserver = (*Store)(nil)
)

// do does o to hits, writing decisions into out, or a settle's answers
// into settled.
func (s *Store) do(ctx context.Context, o scriptOp, hits []limiter.Hit, out []floodgate.Decision, settled []limiter.Settled) error {
	switch {
	case o == opSettle && len(settled) != len(hits):
		return fmt.Errorf("redisstore: %d answers for %d hits", len(settled), len(hits))
	case o != opSettle && o != opRelease && o != opRefund && len(out) != len(hits):
		return fmt.Errorf("redisstore: %d decisions for %d hits", len(out), len(hits))
	}
	if len(hits) == 0 {
		return nil
	}
	for i := range hits {
		if hits[i].Rule == nil {
			return fmt.Errorf("redisstore: hit %d has no rule", i)
		}
		if (o != opRelease && o != opSettle && hits[i].Cost < 1) || hits[i].Cost < 0 {
			return fmt.Errorf("redisstore: hit %d: %w", i, floodgate.ErrInvalidCost)
		}
	}
	if o == opReserve && flagged(hits) {
		return fmt.Errorf("redisstore: a reservation's hits cannot be checks or grouped")
	}
	switch o {
	case opRelease:
		return s.release(ctx, hits)
	case opRefund:
		return s.refundHits(ctx, hits)
	case opSettle:
		return s.settle(ctx, hits, settled)
	}
	if s.mode != Cluster || len(hits) == 1 {
		rq := getRequest()
		for i := range hits {
			rq.idx = append(rq.idx, i)
		}
		_, _, err := s.run(ctx, o, hits, out, nil, rq)
		return err
	}
	return s.applyCluster(ctx, o, hits, out)
}

// release ends the leases of the concurrency hits, one request per hit
// (releases are independent); the other hits are left alone.
func (s *Store) release(ctx context.Context, hits []limiter.Hit) error {
	for i := range hits {
		if s.ruleArgs(hits[i].Rule).alg.Kind() != floodgate.KindConcurrency {
			continue
		}
		rq := getRequest()
		rq.idx = append(rq.idx, i)
		if _, _, err := s.run(ctx, opRelease, hits, nil, nil, rq); err != nil {
			return s.nodeErr(&hits[i], err)
		}
	}
	return nil
}

// refundHits gives back the charges of the refundable hits (token bucket,
// GCRA, leaky bucket and queue: the refund script moves their TAT back by
// the cost, an exact inverse that needs no instant), and of the windows',
// logs' and quotas' hits that name their charges' marks (the server's
// instant of the charge: the script takes the cost from the window,
// log entry or period that holds it, if it is still the key's), one
// script call per hit; the others keep their charge.
func (s *Store) refundHits(ctx context.Context, hits []limiter.Hit) error {
	for i := range hits {
		h := &hits[i]
		mark := int64(0)
		if !h.Rule.Algorithm().Traits().Refundable {
			if h.Mark <= 0 || !marked(h.Rule) {
				continue
			}
			mark = h.Mark / 1000 // the server's instant in µs
		}
		r := &refundCall{args: []string{itoa(mark), "1"}}
		s.appendHit(r, h, mark*1000)
		if _, err := s.eval(ctx, s.refund, r.keys, r.args); err != nil {
			return s.nodeErr(&hits[i], fmt.Errorf("redisstore: refund: %w", err))
		}
	}
	return nil
}

// bySlot returns one request per Cluster slot of the hits, naming the hits
// of that slot, in the order of their first hits.
func (s *Store) bySlot(hits []limiter.Hit) []*request {
	var groups []*request
	var slots []uint16
	for i := range hits {
		sl := slot(s.Key(hits[i].Rule, hits[i].Key))
		g := -1
		for j, x := range slots {
			if x == sl {
				g = j
				break
			}
		}
		if g < 0 {
			slots = append(slots, sl)
			groups = append(groups, getRequest())
			g = len(groups) - 1
		}
		groups[g].idx = append(groups[g].idx, i)
	}
	return groups
}

// applyCluster decides the hits slot by slot (a Charge, Peek or Reserve).
// Groups of hits (limiter.Hit.Group) may span slots: each slot's script
// leaves them open, and once every slot answered the store works out the
// verdict and gives back what was charged if a group stopped the request.
func (s *Store) applyCluster(ctx context.Context, op scriptOp, hits []limiter.Hit, out []floodgate.Decision) error {
	groups := s.bySlot(hits)
	open := op == opCharge && flagged(hits)
	var charged []charge
	defer func() {
		for _, c := range charged {
			putRequest(c.rq)
		}
		// A request that did not go ahead was given back what its slots
		// charged: its decisions name no charge to refund.
		var v limiter.Verdict
		for i := range hits {
			v.Add(&hits[i], out[i].Allowed)
		}
		if v.Refused() {
			for i := range out {
				out[i].Mark = 0
			}
		}
	}()
	curOp := op
	var firstErr error
	for gi, rq := range groups {
		covered := s.keep(rq) // run recycles rq
		// A slot of one check is sent as a peek (prepare): it charges
		// nothing, and stops the request only when its check does.
		lone := curOp == opCharge && len(rq.idx) == 1 && hits[rq.idx[0]].Check
		ok, mark, err := s.runOpen(ctx, curOp, hits, out, nil, rq, open)
		if lone && err == nil {
			h := &hits[covered.idx[0]]
			if out[covered.idx[0]].Allowed || h.Group != 0 || h.Rule.Shadow() {
				putRequest(covered)
				continue
			}
		}
		if err != nil && !errors.Is(err, floodgate.ErrNeverFits) {
			// The state of this slot is unknown; give back what is known.
			for _, rest := range groups[gi+1:] {
				putRequest(rest)
			}
			err = s.nodeErr(&hits[covered.idx[0]], err)
			putRequest(covered)
			s.refundAll(ctx, op, charged, hits, out)
			return err
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if curOp != opPeek && ok {
			charged = append(charged, charge{covered, mark})
			continue
		}
		putRequest(covered)
		if curOp != opPeek {
			// A denial: the rest is only looked at, and the slots
			// charged so far are given back (with the settle records
			// of a reserve).
			curOp = opPeek
			s.refundAll(ctx, op, charged, hits, out)
			for _, c := range charged {
				putRequest(c.rq)
			}
			charged = nil
		}
	}
	if open && len(charged) > 0 {
		var v limiter.Verdict
		for i := range hits {
			v.Add(&hits[i], out[i].Allowed)
		}
		if v.Refused() {
			s.refundAll(ctx, op, charged, hits, out)
		}
	}
	return firstErr
}

// keep returns a request that remembers only which hits rq covered, for a
// refund.
func (s *Store) keep(rq *request) *request {
	k := getRequest()
	k.idx = append(k.idx, rq.idx...)
	return k
}

// charge is a slot that a script call charged, at the server instant mark
// (µs).
type charge struct {
	rq   *request
	mark int64
}

// refundAll gives back the charged slots, and deletes the settle records
// that a Reserve (op) wrote in them. Each refund is sent once, in a call
// of its own that has refundTimeout to be answered whatever happens to
// the request; the request waits for it until its own context ends, so
// that a caller who saw a denial finds nothing charged, and a slow server
// (or an answer this process reads late) never makes a request wait past
// its deadline. A refund whose answer comes after that is not sent again:
// it was sent and Redis applies it, and a charge is never given back
// twice. The log says what became of each refund (refundEnded). Flush
// waits for the refunds still on their way.
func (s *Store) refundAll(ctx context.Context, op scriptOp, charged []charge, hits []limiter.Hit, out []floodgate.Decision) {
	for _, d := range charged {
		r := &refundCall{args: []string{itoa(d.mark), ""}}
		n := 0
		var recs []string
		for _, i := range d.rq.idx {
			if out[i].Allowed && !hits[i].Check {
				s.appendHit(r, &hits[i], d.mark*1000)
				n++
				if op == opReserve && hits[i].Reserve {
					recs = append(recs, recordKey(s.Key(hits[i].Rule, hits[i].Key), hits[i].Lease))
				}
			}
		}
		if n == 0 {
			continue
		}
		r.args[1] = strconv.Itoa(n)
		if len(recs) > 0 {
			r.keys = append(r.keys, recs...)
			r.args = append(r.args, strconv.Itoa(len(recs)))
		}
		if s.refunding.Add(1) > maxRefunds {
			// maxRefunds refunds already wait for their nodes: a node
			// has stopped answering (its client's queue of calls to it
			// would not even take this one, and would hold the request
			// past its deadline). This one is not sent, and its charge
			// stays until its window passes, as a failed refund's does.
			s.refunding.Add(-1)
			s.refundErrors.Add(1)
			if held, ok := s.refundsDropped.Pass(time.Now()); ok {
				s.log.Warn("redisstore: refund not sent, as many wait for a node that does not answer; the charge stays until its window passes",
					"waiting", maxRefunds, "held_back", held)
			}
			continue
		}
		done := make(chan struct{})
		s.refunds.Add(1)
		go func() {
			defer s.refunds.Done()
			defer s.refunding.Add(-1)
			defer close(done)
			sent := time.Now()
			rctx, cancel := context.WithTimeout(context.Background(), refundTimeout)
			defer cancel()
			_, err := s.eval(rctx, s.refund, r.keys, r.args)
			s.refundEnded(err, time.Since(sent))
		}()
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
}

// refundTimeout bounds the call of one refund (Cluster only): as long as
// the client waits for an answer on a connection by default (its write
// timeout, past which it closes the connection), so that a refund that
// Redis applies late is known to be applied rather than taken for lost.
const refundTimeout = 10 * time.Second

// maxRefunds caps the refunds in flight, each on a goroutine of its own
// for up to refundTimeout, past its request's deadline: a node that stops
// answering while requests charged there are denied elsewhere (as many as
// clients send) holds at most that many; a refund past them is not sent
// (counted in RefundErrors, logged at most once a second).
const maxRefunds = 1024

// refundLate is how long a refund's answer takes before it is logged as
// late: a node that slow holds the charge for as long, and the requests
// meanwhile see it.
const refundLate = time.Second

// refundEnded logs and counts what became of a refund, given the error of
// its call and how long it took: given back (logged when it was late),
// refused by Redis (the charge stays), or unanswered (sent, so Redis
// gives the charge back if the call reached it; counted with the
// failures, as the charge may stay).
func (s *Store) refundEnded(err error, took time.Duration) {
	if err == nil {
		if took >= refundLate {
			s.log.Info("redisstore: refund applied late; the charge was held until then", "after", took.Round(time.Millisecond))
		}
		return
	}
	s.refundErrors.Add(1)
	if _, ok := rueidis.IsRedisErr(err); ok {
		s.log.Warn("redisstore: refund failed; the charge stays until its window passes", "err", err)
		return
	}
	s.log.Warn("redisstore: refund unanswered; Redis gives the charge back if the call reached it, else it stays until its window passes",
		"after", took.Round(time.Millisecond), "err", err)
}

// Flush waits until every refund started so far has finished (Cluster only;
// each gives up after refundTimeout, 10 seconds).
func (s *Store) Flush() { s.refunds.Wait() }

// refundCall is a call of refund.lua.
type refundCall struct {
	keys, args []string
}

// appendHit adds the keys and the 12 arguments of one hit to a refund
// call. now (Unix ns) places quota periods; 0 reads this machine's clock
// when a quota needs it.
func (s *Store) appendHit(c *refundCall, h *limiter.Hit, now int64) {
	ra := s.ruleArgs(h.Rule)
	key := s.Key(h.Rule, h.Key)
	c.keys = append(c.keys, key)
	if ra.twoKeys {
		c.keys = append(c.keys, key+":h")
	}
	shadow := "0"
	if h.Rule.Shadow() {
		shadow = "1"
	}
	lease := ra.lease
	if ra.alg.Kind() == floodgate.KindConcurrency {
		lease = strconv.FormatUint(h.Lease, 10)
	}
	c.args = append(c.args, ra.algStr, itoa(h.Cost), shadow, lease)
	switch ra.alg.Family() {
	case floodgate.FamilyRate:
		n, r := ra.costArgs(h.Cost)
		p := &ra.params
		c.args = append(c.args, p[0], p[1], p[2], p[3], n, r, p[6], p[7])
	case floodgate.FamilyQuota:
		if now == 0 {
			now = time.Now().UnixNano()
		}
		b := ra.bounds(now)
		p := &ra.params
		c.args = append(c.args, p[0], b[0], b[1], b[2], b[3], b[4], p[6], p[7])
	default:
		c.args = append(c.args, ra.params[:]...)
	}
}

// now returns the instant used for quota boundaries: the test clock when
// set, else 0 (appendHit then reads this machine's clock, only for quotas).
func (s *Store) now() (goNow int64, scriptNow string) {
	if t := s.testNow.Load(); t != 0 {
		return t * 1000, itoa(t)
	}
	return 0, ""
}

// marked reports whether a charge of r's algorithm says where it was
// counted (Decision.Mark: the server's instant of the script call, in
// Unix ns), for a refund: those of windows, sliding logs and quotas do.
func marked(r *limiter.Rule) bool {
	alg := r.Algorithm()
	return alg.Kind() != floodgate.KindConcurrency && alg.Family() != floodgate.FamilyRate
}

// flagged reports whether some hit is a check or in a group.
func flagged(hits []limiter.Hit) bool {
	for i := range hits {
		if hits[i].Check || hits[i].Group != 0 {
			return true
		}
	}
	return false
}

// prepare writes what the script needs of the hits rq.idx names, for op.
// A charge whose hits are checks or grouped is a flagged charge (a lone
// check is a peek); with open, every group is left for the caller to
// decide (it spans Cluster slots).
func (s *Store) prepare(op scriptOp, hits []limiter.Hit, rq *request, open bool) {
	rq.now, rq.test = s.now() // this machine's clock is read by build, for quotas only
	rq.code, rq.err = opCodes[op], nil
	if op == opCharge {
		switch {
		case len(rq.idx) == 1 && hits[rq.idx[0]].Check:
			rq.code = opCodes[opPeek]
		case len(rq.idx) == 1 && !open:
		default:
			for _, i := range rq.idx {
				if hits[i].Check || hits[i].Group != 0 {
					rq.code = opFlagged
					break
				}
			}
		}
	}
	rq.keys, rq.hits = rq.keys[:0], rq.hits[:0]
	for _, i := range rq.idx {
		h := &hits[i]
		ra := s.ruleArgs(h.Rule)
		key := s.Key(h.Rule, h.Key)
		rq.keys = append(rq.keys, key)
		if ra.twoKeys {
			rq.keys = append(rq.keys, key+":h")
		}
		a := hitArgs{ra: ra, cost: h.Cost}
		if rq.code == opFlagged {
			g := h.Group
			if open && g != 0 {
				g = groupOpen
			}
			a.flags = hitFlags(h.Check, g)
		}
		switch {
		case ra.alg.Family() == floodgate.FamilyRate:
			a.ctNs, a.ctRem = ra.costT(h.Cost)
		case ra.alg.Kind() == floodgate.KindConcurrency && h.Lease != 0:
			a.lease = strconv.FormatUint(h.Lease, 10)
		}
		switch {
		case op == opSettle:
			rq.keys = append(rq.keys, recordKey(key, h.Lease))
		case op == opReserve && h.Reserve:
			a.ttl = recordTTL(h.TTL)
			rq.recs = append(rq.recs, recordKey(key, h.Lease))
		}
		rq.hits = append(rq.hits, a)
	}
	rq.keys = append(rq.keys, rq.recs...)
	clear(rq.recs)
	rq.recs = rq.recs[:0]
}

// recordKey is the key of a reservation's settle record for a counter's
// key: <key>:r:<reservation>, in the counter's slot.
func recordKey(key string, id uint64) string {
	var num [20]byte
	var b strings.Builder // one allocation
	b.Grow(len(key) + 3 + len(num))
	b.WriteString(key)
	b.WriteString(":r:")
	b.Write(strconv.AppendUint(num[:0], id, 10))
	return b.String()
}

// recordTTL is a settle record's TTL in ms for a reservation's TTL
// (0: floodgate.DefaultReservationTTL), rounded up.
func recordTTL(ttl time.Duration) int64 {
	if ttl <= 0 {
		ttl = floodgate.DefaultReservationTTL
	}
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}

// run has the hits rq.idx names decided (as one request, in their slot's
// lane) and fills their decisions into out, or a settle's answers into
// settled (a release answers nothing). It reports whether the request was
// charged and the server instant. It takes rq and recycles it.
func (s *Store) run(ctx context.Context, op scriptOp, hits []limiter.Hit, out []floodgate.Decision, settled []limiter.Settled, rq *request) (bool, int64, error) {
	return s.runOpen(ctx, op, hits, out, settled, rq, false)
}

// runOpen is run; with open, the groups of the hits are decided by the
// caller (see prepare).
func (s *Store) runOpen(ctx context.Context, op scriptOp, hits []limiter.Hit, out []floodgate.Decision, settled []limiter.Settled, rq *request, open bool) (bool, int64, error) {
	s.prepare(op, hits, rq, open)
	ln := &s.single
	if s.mode == Cluster {
		ln = s.laneFor(slot(rq.keys[0]))
	}
	owned, err := s.send(ctx, ln, rq)
	if !owned {
		return false, 0, err
	}
	defer putRequest(rq)
	if err != nil {
		return false, 0, err
	}
	var never error
	for j, i := range rq.idx {
		v := rq.vals[6*j : 6*j+6]
		switch op {
		case opRelease:
			continue
		case opSettle:
			// found, free units, overrun (and a reset, not answered:
			// the stores worked it out differently, and nothing reads it),
			// the estimate and the excess charged
			if settled[i] = (limiter.Settled{}); v[0] == 1 {
				over := v[2]
				if over > 0 {
					// Exactly, from the actual cost: the script's doubles
					// round one near the int64 bound (2^63 is no int64).
					over = hits[i].Cost - v[4] - v[5]
				}
				settled[i] = limiter.Settled{Found: true, Remaining: v[1], Overrun: over}
			}
			continue
		}
		out[i] = floodgate.Decision{
			Allowed:    v[0] == 1,
			Limit:      hits[i].Rule.Params().Capacity(),
			Remaining:  v[1],
			RetryAfter: time.Duration(v[2]),
			ResetAfter: time.Duration(v[3]),
			Delay:      time.Duration(v[4]),
		}
		if (op == opCharge || op == opReserve) && rq.got == 1 && v[0] == 1 && !hits[i].Check && marked(hits[i].Rule) {
			out[i].Mark = rq.mark * 1000 // µs to ns
		}
		if v[5] == 1 && never == nil {
			never = fmt.Errorf("redisstore: %s: %w", hits[i].Rule.ID(), floodgate.ErrNeverFits)
		}
	}
	return rq.got == 1, rq.mark, never
}

// settle ends the reservations the hits name (see limiter.Reserver): all
// in one request on a standalone server; on a Cluster one request per
// slot, each atomic in its slot. A call that fails stops the rest: their
// reservations settle at their estimates when their TTLs pass.
func (s *Store) settle(ctx context.Context, hits []limiter.Hit, out []limiter.Settled) error {
	if s.mode != Cluster || len(hits) == 1 {
		rq := getRequest()
		for i := range hits {
			rq.idx = append(rq.idx, i)
		}
		_, _, err := s.run(ctx, opSettle, hits, nil, out, rq)
		return err
	}
	groups := s.bySlot(hits)
	for gi, rq := range groups {
		first := rq.idx[0] // run recycles rq
		if _, _, err := s.run(ctx, opSettle, hits, nil, out, rq); err != nil {
			for _, rest := range groups[gi+1:] {
				putRequest(rest)
			}
			return s.nodeErr(&hits[first], err)
		}
	}
	return nil
}

// nodeErr wraps err, the failure of a call for h on a Cluster, in a
// limiter.PartitionError that names h's node as Partition does: the
// engine then holds a failed call whose hits span several nodes against
// that node's breaker alone. Outside a Cluster, or for a slot whose node
// is not known, err is left as it is.
func (s *Store) nodeErr(h *limiter.Hit, err error) error {
	r := s.replies
	if r == nil || !r.cluster {
		return err
	}
	m := r.slots.Load()
	if m == nil {
		return err
	}
	o := m.owner[s.keySlot(h.Rule, h.Key)]
	if o == 0 {
		return err
	}
	return &limiter.PartitionError{Partition: m.addrs[o-1], Err: err}
}

// Lease implements limiter.Leaser for token bucket, GCRA, leaky bucket and
// fixed window limits: one request (batched with the others) gives back
// the units of back when they still count, then takes want units of h's
// counter if it has them, else h.Cost, else nothing.
func (s *Store) Lease(ctx context.Context, h *limiter.Hit, want int64, back limiter.Giveback) (limiter.Grant, error) {
	if h.Rule == nil {
		return limiter.Grant{}, errors.New("redisstore: lease: hit has no rule")
	}
	if !h.Rule.Algorithm().Traits().Leasable {
		return limiter.Grant{}, fmt.Errorf("redisstore: lease: %s: %w: %s cannot be leased", h.Rule.ID(),
			floodgate.ErrInvalidLimit, h.Rule.Algorithm())
	}
	c := h.Rule.Capacity()
	if want < 0 || h.Cost < 0 || back.Units < 0 {
		return limiter.Grant{}, fmt.Errorf("redisstore: lease: %w", floodgate.ErrInvalidCost)
	}
	if h.Cost > c {
		return limiter.Grant{}, fmt.Errorf("redisstore: lease: %s: %w", h.Rule.ID(), floodgate.ErrNeverFits)
	}
	want = min(want, c)
	rq := getRequest()
	rq.idx = append(rq.idx, 0)
	one := [1]limiter.Hit{*h}
	s.prepare(opCharge, one[:], rq, false)
	rq.code = opLease
	ra := rq.hits[0].ra
	rq.ls = leaseArgs{want: want, back: min(back.Units, c), mark: back.Mark}
	if ra.alg.Family() == floodgate.FamilyRate {
		rq.ls.wtNs, rq.ls.wtRem = ra.costT(want)
		rq.ls.btNs, rq.ls.btRem = ra.costT(rq.ls.back)
	}
	ln := &s.single
	if s.mode == Cluster {
		ln = s.laneFor(slot(rq.keys[0]))
	}
	owned, err := s.send(ctx, ln, rq)
	if !owned {
		return limiter.Grant{}, err
	}
	defer putRequest(rq)
	if err != nil {
		return limiter.Grant{}, err
	}
	v := rq.vals[:6]
	return limiter.Grant{Units: rq.got, Mark: rq.mark, Decision: floodgate.Decision{
		Allowed: v[0] == 1, Limit: c, Remaining: v[1], RetryAfter: time.Duration(v[2]),
		ResetAfter: time.Duration(v[3]), Delay: time.Duration(v[4])}}, nil
}

var _ limiter.Leaser = (*Store)(nil)

// Calls returns the number of script calls that decided requests so far,
// and the number of requests they decided: their ratio is the batching's
// gain.
func (s *Store) Calls() (calls, requests int64) { return s.calls.Load(), s.decided.Load() }

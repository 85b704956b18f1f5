package alarm

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/bits"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/lograte"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// Plan is the alarm settings of one usage plan.
type Plan struct {
	// Thresholds are percentages of the quota (1 to 100).
	Thresholds []int
	// Webhook, when set, receives each alarm.
	Webhook string
	// Secret signs the webhook's body.
	Secret []byte
	// AllowLinkLocal lets the webhook reach link-local and cloud metadata
	// addresses, refused otherwise (see CheckWebhook).
	AllowLinkLocal bool
}

// Event is an alarm, as the webhook receives it.
type Event struct {
	// Type is "quota.threshold".
	Type string `json:"type"`
	// ID identifies the alarm: the same for every instance and attempt.
	ID        string    `json:"id"`
	Key       string    `json:"key"`
	Plan      string    `json:"plan"`
	Limit     string    `json:"limit"`
	Threshold int       `json:"threshold_percent"`
	Used      int64     `json:"used"`
	Quota     int64     `json:"quota"`
	Percent   float64   `json:"percent"`
	PeriodEnd time.Time `json:"period_end"`
	Time      time.Time `json:"time"`
	Instance  string    `json:"instance,omitempty"`
}

// Deduper claims an alarm once across the processes that share it.
type Deduper interface {
	// Once reports whether this call is the first for id before until.
	Once(ctx context.Context, id string, until time.Time) (bool, error)
}

// Options configures Alarms. Dedup is required.
type Options struct {
	Dedup Deduper
	// Timeout bounds one delivery attempt: connecting, sending and
	// reading the answer (default 10 s).
	Timeout time.Duration
	// Resolver resolves the webhooks' host names (default
	// net.DefaultResolver).
	Resolver *net.Resolver
	// Deny lists addresses no webhook may reach, whatever its plan
	// allows, checked on the URL and on every address dialled.
	Deny []netip.Prefix
	// Logger receives the alarms' log lines (default: discard).
	Logger *slog.Logger
	// Registerer, if set, gets the alarm metrics.
	Registerer prometheus.Registerer
	// QueueSize bounds the alarms waiting to be claimed (default 1024).
	QueueSize int
	// TargetQueueSize bounds the alarms waiting for one webhook URL
	// (default 1024).
	TargetQueueSize int
	// TargetConcurrency bounds the deliveries under way to one webhook
	// URL (default 4). Each URL has its own queue and deliveries, so that
	// a slow receiver delays only its own alarms.
	TargetConcurrency int
	// MaxAttempts bounds a webhook's deliveries (default 8).
	MaxAttempts int
	// Backoff is the first retry's wait (default 500 ms), doubled up to
	// 30 s.
	Backoff time.Duration
	// Instance names this process in events.
	Instance string
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Alarms watches quota hits and fires alarms.
type Alarms struct {
	o     Options
	log   *slog.Logger
	plans atomic.Pointer[map[string]*planAlarm] // by quota limit name
	queue chan candidate

	mu sync.Mutex // guards seen
	// seen holds, for each alarm this process queued, the Unix time (ns)
	// until which it is not queued again: its quota period's end, or, for
	// one dropped for want of room, the end of its retry pause.
	seen map[seenKey]int64
	// dropLog holds back the lines of dropped alarms: many keys crossing
	// their thresholds while a queue is full must not flood the log.
	dropLog lograte.Gate

	// clients deliver webhooks: [1] to targets that may be link-local.
	clients [2]*http.Client

	tmu     sync.Mutex // guards targets, each target's queue and workers, and left
	targets map[targetKey]*target
	// left are the alarms claimed and not delivered when Run's context
	// ended: their claims are given back as Run returns.
	left []*delivery

	alarms, webhooks *prometheus.CounterVec
	pending          sync.WaitGroup
}

// targetKey names a webhook target: its URL, and whether it may be
// link-local (which client reaches it).
type targetKey struct {
	url            string
	allowLinkLocal bool
}

// target is the alarms waiting for one webhook target and the workers
// delivering them; it exists while it has work.
type target struct {
	queue   []*delivery
	workers int
}

// delivery is one alarm to post.
type delivery struct {
	plan *planAlarm
	ev   Event
	key  seenKey // the alarm, as seen holds it
}

type planAlarm struct {
	plan string
	Plan
}

type seenKey struct {
	counter, limit string
	threshold      int
	periodEnd      int64
}

type candidate struct {
	seenKey
	plan  *planAlarm
	used  int64
	quota int64
	at    time.Time
}

// New makes the alarms; Run delivers them.
func New(o Options) (*Alarms, error) {
	if o.Dedup == nil {
		return nil, fmt.Errorf("alarm: a deduper is required")
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 1024
	}
	if o.TargetQueueSize <= 0 {
		o.TargetQueueSize = 1024
	}
	if o.TargetConcurrency <= 0 {
		o.TargetConcurrency = 4
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 8
	}
	if o.Backoff <= 0 {
		o.Backoff = 500 * time.Millisecond
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	a := &Alarms{o: o, log: o.Logger, queue: make(chan candidate, o.QueueSize), seen: map[seenKey]int64{},
		targets: map[targetKey]*target{}}
	for i, allow := range []bool{false, true} {
		a.clients[i] = newClient(guard{allowLinkLocal: allow, deny: o.Deny}, o.Timeout, o.Resolver)
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	empty := map[string]*planAlarm{}
	a.plans.Store(&empty)
	a.alarms = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "floodgate_quota_alarms_total",
		Help: "Quota thresholds reached, by plan, threshold and result: fired (claimed by this instance), " +
			"duplicate (another instance fired it) or dropped (the queue was full)."}, []string{"plan", "threshold", "result"})
	a.webhooks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "floodgate_alarm_webhooks_total",
		Help: "Alarm webhooks by result: delivered, failed after every attempt, dropped (the webhook's queue was full, or a reload turned it off), or abandoned (not delivered when the process stopped; the claim is given back for another instance)."},
		[]string{"result"})
	// Every result's series exists from the start, at 0, so that a rate or
	// an alert over it sees the first webhook that fails.
	for _, r := range []string{"delivered", "failed", "dropped", "abandoned"} {
		a.webhooks.WithLabelValues(r)
	}
	if o.Registerer != nil {
		for _, c := range []prometheus.Collector{a.alarms, a.webhooks} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("alarm: metrics: %w", err)
			}
		}
	}
	return a, nil
}

// SetPolicy applies the plans' alarm settings to the quota limits of p.
// Call it at the start and after each reload. A plan whose webhook is
// refused (see CheckWebhook and Options.Deny) keeps its alarms without the
// webhook; the error names each such plan.
func (a *Alarms) SetPolicy(p *policy.Policy, plans map[string]Plan) error {
	var errs []error
	plans = maps.Clone(plans)
	for _, name := range slices.Sorted(maps.Keys(plans)) {
		pl := plans[name]
		if pl.Webhook == "" {
			continue
		}
		if err := (guard{allowLinkLocal: pl.AllowLinkLocal, deny: a.o.Deny}).checkURL(pl.Webhook); err != nil {
			errs = append(errs, fmt.Errorf("alarm: plan %s: the webhook is off: %w", name, err))
			pl.Webhook = ""
			plans[name] = pl
		}
	}
	m := map[string]*planAlarm{}
	for _, l := range p.Limits() {
		if l.Scope != policy.ScopePlan || l.Kind != floodgate.KindQuota {
			continue
		}
		pl, ok := plans[l.Plan]
		if !ok || len(pl.Thresholds) == 0 {
			continue
		}
		th := append([]int(nil), pl.Thresholds...)
		sort.Ints(th)
		pl.Thresholds = th
		m[l.Name] = &planAlarm{plan: l.Plan, Plan: pl}
	}
	a.plans.Store(&m)
	return errors.Join(errs...)
}

// ObserveDecision looks at the quota hits of API keys whose plan has
// alarms. A hit decided by its failure policy (the store failed, timed
// out or its breaker was open) is passed over: its decision says nothing
// about what the key has used (one that fails closed reads as a quota used
// up), and an outage must neither fire every key's alarms nor mark them as
// fired for the period.
func (a *Alarms) ObserveDecision(req *limiter.Request, res *limiter.Result) {
	if req.Peek {
		return
	}
	plans := *a.plans.Load()
	if len(plans) == 0 {
		return
	}
	for i := range req.Hits {
		h := &req.Hits[i]
		if h.Rule.Algorithm() != floodgate.Quota || !strings.HasPrefix(h.Key, "key:") {
			continue
		}
		pa := plans[h.Rule.Name()]
		if pa == nil || i >= len(res.Decisions) {
			continue
		}
		if i < len(res.Flags) && res.Flags[i]&limiter.Degraded != 0 {
			continue
		}
		d := &res.Decisions[i]
		if d.Limit <= 0 {
			continue
		}
		used := d.Limit - d.Remaining
		if used <= 0 {
			continue
		}
		for _, t := range pa.Thresholds {
			if !reached(used, d.Limit, t) {
				break
			}
			a.crossed(h, d, pa, t, used)
		}
	}
}

// reached reports whether used units of a quota of limit are at least
// percent % of it. The products are taken in 128 bits: a quota near the
// largest int64 (an "unlimited" plan) would overflow 64.
func reached(used, limit int64, percent int) bool {
	if percent <= 0 {
		return true
	}
	uh, ul := bits.Mul64(uint64(used), 100)
	th, tl := bits.Mul64(uint64(percent), uint64(limit))
	return uh > th || (uh == th && ul >= tl)
}

// crossed queues an alarm not seen yet in this process.
func (a *Alarms) crossed(h *limiter.Hit, d *floodgate.Decision, pa *planAlarm, threshold int, used int64) {
	now := a.o.Now()
	l := h.Rule.Limit()
	// The period's end, at the calendar's boundary nearest the store's
	// reset, so that every instance names it alike whatever its clock's
	// skew from the store's.
	end := algo.QuotaBoundary(&l, now.Add(d.ResetAfter).UnixNano())
	k := seenKey{counter: h.Key, limit: h.Rule.Name(), threshold: threshold, periodEnd: end}
	a.mu.Lock()
	if until, dup := a.seen[k]; dup && until > now.UnixNano() {
		a.mu.Unlock()
		return
	}
	if len(a.seen) >= 100_000 {
		a.pruneLocked(now.UnixNano())
	}
	a.seen[k] = end
	a.mu.Unlock()
	c := candidate{seenKey: k, plan: pa, used: used, quota: d.Limit, at: now}
	select {
	case a.queue <- c:
	default:
		a.retryLater(k, now)
		a.alarms.WithLabelValues(pa.plan, strconv.Itoa(threshold), "dropped").Inc()
		if held, ok := a.dropLog.Pass(now); ok {
			a.log.Warn("alarm: queue full, alarm dropped; the key's next request after the retry pause queues it again",
				"key", keyName(h.Key), "plan", pa.plan, "threshold", threshold, "retry_pause", dropRetry, "held_back", held)
		}
	}
}

// dropRetry is how long an alarm dropped for want of room (the alarms'
// queue, or its webhook's, was full) is not queued again: the key's first
// request after it queues the alarm anew, so that a burst of keys larger
// than a queue delays their alarms instead of losing them for the rest of
// their quota period.
const dropRetry = 10 * time.Second

// retryLater lets the alarm k be queued again by a request from
// dropRetry after now on.
func (a *Alarms) retryLater(k seenKey, now time.Time) {
	a.mu.Lock()
	a.seen[k] = now.Add(dropRetry).UnixNano()
	a.mu.Unlock()
}

// pruneLocked forgets alarms of ended periods, or all of them when that
// is not enough (the Deduper still stops repeats). a.mu is held.
func (a *Alarms) pruneLocked(now int64) {
	for k, end := range a.seen {
		if end <= now {
			delete(a.seen, k)
		}
	}
	if len(a.seen) >= 100_000 {
		clear(a.seen)
	}
}

// keyName is the API key's name in a counter key "key:NAME" or
// "key:NAME#N".
func keyName(counter string) string {
	name := strings.TrimPrefix(counter, "key:")
	if i := strings.LastIndexByte(name, '#'); i >= 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			name = name[:i]
		}
	}
	return name
}

// dedupTimeout bounds the claim of one alarm.
const dedupTimeout = 5 * time.Second

// releaseTimeout bounds giving back the claims of the alarms left
// undelivered when Run stops.
const releaseTimeout = 5 * time.Second

// Run claims queued alarms and hands those with a webhook to their
// target's queue until ctx ends, then waits for deliveries under way to
// give up, and gives back the claims of the alarms it claimed and could
// not deliver (queued, or between two attempts), so that another
// instance fires them: a rolling restart loses no alarm to a claim that
// would otherwise stand until the quota period ends.
func (a *Alarms) Run(ctx context.Context) {
	defer a.releaseLeft()
	defer a.pending.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case c := <-a.queue:
			a.handle(ctx, c)
		}
	}
}

// leave notes an alarm claimed and not delivered when Run's context ended.
func (a *Alarms) leave(d *delivery) {
	a.tmu.Lock()
	a.left = append(a.left, d)
	a.tmu.Unlock()
}

// releaseLeft gives back the claims of the alarms left undelivered,
// counts them and says so once.
func (a *Alarms) releaseLeft() {
	a.tmu.Lock()
	left := a.left
	a.left = nil
	a.tmu.Unlock()
	if len(left) == 0 {
		return
	}
	a.webhooks.WithLabelValues("abandoned").Add(float64(len(left)))
	r, ok := a.o.Dedup.(Releaser)
	if !ok {
		a.log.Warn("alarm: alarms not delivered before the stop", "alarms", len(left))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	given := 0
	for _, d := range left {
		if err := r.Release(ctx, "alarm:"+d.ev.ID); err != nil {
			a.log.Warn("alarm: claim not given back", "id", d.ev.ID, "err", err)
			continue
		}
		given++
	}
	a.log.Warn("alarm: alarms not delivered before the stop; their claims given back for another instance",
		"alarms", len(left), "given_back", given)
}

func (a *Alarms) handle(ctx context.Context, c candidate) {
	ev := Event{Type: "quota.threshold", Key: keyName(c.counter), Plan: c.plan.plan, Limit: c.limit,
		Threshold: c.threshold, Used: c.used, Quota: c.quota, Percent: float64(c.used) * 100 / float64(c.quota),
		PeriodEnd: time.Unix(0, c.periodEnd).UTC(), Time: c.at.UTC(), Instance: a.o.Instance}
	ev.ID = eventID(c)
	d := &delivery{plan: c.plan, ev: ev, key: c.seenKey}
	if c.plan.Webhook != "" && a.targetFull(targetKey{url: c.plan.Webhook, allowLinkLocal: c.plan.AllowLinkLocal}) {
		// No room for it: the alarm is not claimed, so that it fires
		// later, here or on another instance.
		a.dropped(d, false)
		return
	}
	dctx, cancel := context.WithTimeout(ctx, dedupTimeout)
	first, err := a.o.Dedup.Once(dctx, "alarm:"+ev.ID, ev.PeriodEnd)
	cancel()
	if err != nil {
		a.log.Warn("alarm: dedup failed; firing anyway", "id", ev.ID, "err", err)
		first = true
	}
	if !first {
		a.alarms.WithLabelValues(c.plan.plan, strconv.Itoa(c.threshold), "duplicate").Inc()
		return
	}
	a.alarms.WithLabelValues(c.plan.plan, strconv.Itoa(c.threshold), "fired").Inc()
	a.log.Warn("alarm: quota threshold reached", "key", ev.Key, "plan", ev.Plan, "threshold_percent", ev.Threshold,
		"used", ev.Used, "quota", ev.Quota, "period_end", ev.PeriodEnd)
	if c.plan.Webhook == "" {
		return
	}
	a.enqueue(ctx, d)
}

// targetFull reports whether the queue of the webhook target k is full.
func (a *Alarms) targetFull(k targetKey) bool {
	a.tmu.Lock()
	defer a.tmu.Unlock()
	tg := a.targets[k]
	return tg != nil && len(tg.queue) >= a.o.TargetQueueSize
}

// dropped counts and drops d, whose webhook's queue is full, and lets the
// key's next request after dropRetry queue it again. A claimed alarm's
// claim is given back (when the Deduper is a Releaser), so that this
// instance or another can fire it then: a claim kept would stand, and the
// alarm be lost, until the quota period ends.
func (a *Alarms) dropped(d *delivery, claimed bool) {
	now := a.o.Now()
	a.webhooks.WithLabelValues("dropped").Inc()
	if claimed {
		if r, ok := a.o.Dedup.(Releaser); ok {
			ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
			if err := r.Release(ctx, "alarm:"+d.ev.ID); err != nil {
				a.log.Warn("alarm: claim of a dropped alarm not given back", "id", d.ev.ID, "err", err)
			}
			cancel()
		}
	}
	a.retryLater(d.key, now)
	if held, ok := a.dropLog.Pass(now); ok {
		a.log.Warn("alarm: webhook queue full, alarm dropped; the key's next request after the retry pause queues it again",
			"id", d.ev.ID, "plan", d.ev.Plan, "retry_pause", dropRetry, "held_back", held)
	}
}

// enqueue puts d in its target's queue, and starts a worker for the
// target if it has fewer than Options.TargetConcurrency. Only Run and the
// workers call it, so that every worker starts before Run waits for them.
func (a *Alarms) enqueue(ctx context.Context, d *delivery) {
	k := targetKey{url: d.plan.Webhook, allowLinkLocal: d.plan.AllowLinkLocal}
	a.tmu.Lock()
	tg := a.targets[k]
	if tg == nil {
		tg = &target{}
		a.targets[k] = tg
	}
	if len(tg.queue) >= a.o.TargetQueueSize {
		a.tmu.Unlock()
		a.dropped(d, true)
		return
	}
	tg.queue = append(tg.queue, d)
	start := tg.workers < a.o.TargetConcurrency
	if start {
		tg.workers++
		a.pending.Add(1)
	}
	a.tmu.Unlock()
	if start {
		go a.work(ctx, k, tg)
	}
}

// work delivers the alarms of one target until its queue is empty (or ctx
// ends); the last worker to leave forgets the target.
func (a *Alarms) work(ctx context.Context, k targetKey, tg *target) {
	defer a.pending.Done()
	for {
		a.tmu.Lock()
		if ctx.Err() != nil {
			a.left = append(a.left, tg.queue...)
			clear(tg.queue)
			tg.queue = tg.queue[:0]
		}
		if len(tg.queue) == 0 {
			tg.workers--
			if tg.workers == 0 {
				delete(a.targets, k)
			}
			a.tmu.Unlock()
			return
		}
		d := tg.queue[0]
		tg.queue[0] = nil
		tg.queue = tg.queue[1:]
		a.tmu.Unlock()
		a.deliver(ctx, k, d)
	}
}

// eventID names an alarm alike on every instance.
func eventID(c candidate) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%d", c.counter, c.limit, c.threshold, c.periodEnd)
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// Sign returns the signature header value of a body sent at ts.
func Sign(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether sig is the signature of body sent at ts, ts
// being a Unix second as Sign's caller writes it (decimal digits, no sign,
// no leading zero): the signed bytes are ts "." body, so a timestamp
// holding anything else could move the bytes of the body into it. It does
// not look at how old ts is: a receiver calls VerifyAt, which does, to
// refuse a delivery recorded and sent again.
func Verify(secret []byte, ts string, body []byte, sig string) bool {
	if _, ok := unixSecond(ts); !ok {
		return false
	}
	return hmac.Equal([]byte(Sign(secret, ts, body)), []byte(sig))
}

// DefaultTolerance is how far from the receiver's clock VerifyAt takes a
// webhook's timestamp to be when it is given no tolerance: each attempt
// of a delivery is signed when it is sent, so only clock skew and the
// time in transit stand between the two.
const DefaultTolerance = 5 * time.Minute

// The errors of VerifyAt, for errors.Is.
var (
	// ErrBadTimestamp is a timestamp that is not a Unix second.
	ErrBadTimestamp = errors.New("alarm: webhook timestamp is not a Unix second")
	// ErrBadSignature is a signature that is not the body's at its
	// timestamp with the secret.
	ErrBadSignature = errors.New("alarm: webhook signature does not match")
	// ErrStaleTimestamp is a signature made further from now than the
	// tolerance: a delivery sent again (a replay), or a clock far off.
	ErrStaleTimestamp = errors.New("alarm: webhook timestamp outside the tolerance")
)

// VerifyAt checks a webhook received at now: sig must be the signature of
// body sent at ts (see Verify), and ts no further from now than tolerance
// (DefaultTolerance when tolerance is 0 or less), so that a delivery
// recorded and sent again later is refused. Within the tolerance a
// receiver takes each Event.ID once: a retried alarm comes again with the
// same ID.
func VerifyAt(secret []byte, ts string, body []byte, sig string, now time.Time, tolerance time.Duration) error {
	sec, ok := unixSecond(ts)
	if !ok {
		if len(ts) > 32 {
			ts = ts[:32] + "…"
		}
		return fmt.Errorf("%w: %q", ErrBadTimestamp, ts)
	}
	if !hmac.Equal([]byte(Sign(secret, ts, body)), []byte(sig)) {
		return ErrBadSignature
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	if off := now.Sub(time.Unix(sec, 0)); off > tolerance || off < -tolerance {
		return fmt.Errorf("%w: signed %v from now, tolerance %v", ErrStaleTimestamp, off.Round(time.Second), tolerance)
	}
	return nil
}

// unixSecond reads ts as Sign's callers write a Unix second: decimal
// digits, no sign, no leading zero, after 1970.
func unixSecond(ts string) (int64, bool) {
	v, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || v <= 0 || strconv.FormatInt(v, 10) != ts {
		return 0, false
	}
	return v, true
}

// current returns the alarm settings in force for d's quota limit, or nil
// when a reload turned its webhook (or its alarms) off.
func (a *Alarms) current(d *delivery) *planAlarm {
	pa := (*a.plans.Load())[d.ev.Limit]
	if pa == nil || pa.Webhook == "" {
		return nil
	}
	return pa
}

// deliver posts d's event to its plan's webhook (target k), retrying.
// Each attempt takes the plan's settings in force then, so that a reload
// decides where pending alarms go and how they are signed: one that
// turns the webhook off drops them, one that gives the plan another
// webhook hands them to that webhook's queue.
func (a *Alarms) deliver(ctx context.Context, k targetKey, d *delivery) {
	ev := &d.ev
	body, err := json.Marshal(ev)
	if err != nil {
		return
	}
	wait := a.o.Backoff
	for attempt := 1; ; attempt++ {
		pa := a.current(d)
		if pa == nil {
			a.webhooks.WithLabelValues("dropped").Inc()
			a.log.Warn("alarm: webhook turned off, alarm dropped", "id", ev.ID, "plan", ev.Plan)
			return
		}
		d.plan = pa
		if (targetKey{url: pa.Webhook, allowLinkLocal: pa.AllowLinkLocal}) != k {
			a.enqueue(ctx, d)
			return
		}
		retry, err := a.post(ctx, pa, body)
		if err == nil {
			a.webhooks.WithLabelValues("delivered").Inc()
			return
		}
		if ctx.Err() != nil {
			a.leave(d)
			return
		}
		if !retry || attempt >= a.o.MaxAttempts {
			a.webhooks.WithLabelValues("failed").Inc()
			a.log.Error("alarm: webhook not delivered", "id", ev.ID, "plan", ev.Plan, "attempts", attempt, "err", err)
			return
		}
		// Full jitter over the doubling wait.
		pause := time.Duration(rand.Int64N(int64(wait))) + wait/2
		select {
		case <-ctx.Done():
			a.leave(d)
			return
		case <-time.After(pause):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// post sends one attempt; retry says whether another may succeed.
func (a *Alarms) post(ctx context.Context, pa *planAlarm, body []byte) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, pa.Webhook, strings.NewReader(string(body)))
	if err != nil {
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a token
		}
		return false, fmt.Errorf("alarm: webhook %s: %w", WebhookName(pa.Webhook), err)
	}
	ts := strconv.FormatInt(a.o.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "floodgate-alarm/1")
	req.Header.Set("X-Floodgate-Timestamp", ts)
	req.Header.Set("X-Floodgate-Signature", Sign(pa.Secret, ts, body))
	client := a.clients[0]
	if pa.AllowLinkLocal {
		client = a.clients[1]
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			// net/http names the whole URL; its path and query may
			// hold the receiver's token.
			err = fmt.Errorf("%s %s: %w", ue.Op, WebhookName(pa.Webhook), ue.Err)
		}
		// A refused address stays refused: no retry.
		return !errors.Is(err, ErrRefusedTarget), fmt.Errorf("alarm: webhook: %w", err)
	}
	// Read a little of the answer so that the connection can be reused.
	_, _ = io.CopyN(io.Discard, resp.Body, maxResponseBody)
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return false, nil
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		// Redirects are never followed: the signed body and its headers
		// go only to the configured URL.
		return false, fmt.Errorf("alarm: webhook: %s: redirects are not followed", resp.Status)
	case resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode >= 500:
		return true, fmt.Errorf("alarm: webhook: %s", resp.Status)
	}
	return false, fmt.Errorf("alarm: webhook: %s", resp.Status)
}

package alarm

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
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
	// Client delivers webhooks (default: a client with a 10 s timeout).
	Client *http.Client
	// Logger receives the alarms' log lines (default: discard).
	Logger *slog.Logger
	// Registerer, if set, gets the alarm metrics.
	Registerer prometheus.Registerer
	// QueueSize bounds the alarms waiting for delivery (default 1024).
	QueueSize int
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

	mu   sync.Mutex // guards seen
	seen map[seenKey]int64

	alarms, webhooks *prometheus.CounterVec
	pending          sync.WaitGroup
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
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 1024
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
	a := &Alarms{o: o, log: o.Logger, queue: make(chan candidate, o.QueueSize), seen: map[seenKey]int64{}}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	empty := map[string]*planAlarm{}
	a.plans.Store(&empty)
	a.alarms = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "floodgate_quota_alarms_total",
		Help: "Quota thresholds reached, by plan, threshold and result: fired (claimed by this instance), " +
			"duplicate (another instance fired it) or dropped (the queue was full)."}, []string{"plan", "threshold", "result"})
	a.webhooks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "floodgate_alarm_webhooks_total",
		Help: "Alarm webhooks by result: delivered, or failed after every attempt."}, []string{"result"})
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
// Call it at the start and after each reload.
func (a *Alarms) SetPolicy(p *policy.Policy, plans map[string]Plan) {
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
}

// ObserveDecision looks at the quota hits of API keys whose plan has
// alarms.
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
		if pa == nil {
			continue
		}
		d := &res.Decisions[i]
		if d.Limit <= 0 {
			continue
		}
		used := d.Limit - d.Remaining
		for _, t := range pa.Thresholds {
			if used*100 < int64(t)*d.Limit {
				break
			}
			a.crossed(h, d, pa, t, used)
		}
	}
}

// crossed queues an alarm not seen yet in this process.
func (a *Alarms) crossed(h *limiter.Hit, d *floodgate.Decision, pa *planAlarm, threshold int, used int64) {
	now := a.o.Now()
	l := h.Rule.Limit()
	// The period's end, snapped to the calendar so that every instance
	// names it alike whatever its clock's skew.
	_, end := algo.QuotaPeriod(&l, now.Add(d.ResetAfter).UnixNano()-int64(500*time.Millisecond))
	k := seenKey{counter: h.Key, limit: h.Rule.Name(), threshold: threshold, periodEnd: end}
	a.mu.Lock()
	if _, dup := a.seen[k]; dup {
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
		a.alarms.WithLabelValues(pa.plan, strconv.Itoa(threshold), "dropped").Inc()
		a.log.Warn("alarm: queue full, alarm dropped", "key", keyName(h.Key), "plan", pa.plan, "threshold", threshold)
	}
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

// Run claims and delivers queued alarms until ctx ends, then waits for
// deliveries under way to give up.
func (a *Alarms) Run(ctx context.Context) {
	defer a.pending.Wait()
	sem := make(chan struct{}, 4)
	for {
		select {
		case <-ctx.Done():
			return
		case c := <-a.queue:
			a.handle(ctx, c, sem)
		}
	}
}

func (a *Alarms) handle(ctx context.Context, c candidate, sem chan struct{}) {
	ev := Event{Type: "quota.threshold", Key: keyName(c.counter), Plan: c.plan.plan, Limit: c.limit,
		Threshold: c.threshold, Used: c.used, Quota: c.quota, Percent: float64(c.used) * 100 / float64(c.quota),
		PeriodEnd: time.Unix(0, c.periodEnd).UTC(), Time: c.at.UTC(), Instance: a.o.Instance}
	ev.ID = eventID(c)
	first, err := a.o.Dedup.Once(ctx, "alarm:"+ev.ID, ev.PeriodEnd)
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
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	a.pending.Add(1)
	go func() {
		defer a.pending.Done()
		defer func() { <-sem }()
		a.deliver(ctx, c.plan, &ev)
	}()
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

// Verify reports whether sig is the signature of body sent at ts.
func Verify(secret []byte, ts string, body []byte, sig string) bool {
	return hmac.Equal([]byte(Sign(secret, ts, body)), []byte(sig))
}

// deliver posts ev to the plan's webhook, retrying.
func (a *Alarms) deliver(ctx context.Context, pa *planAlarm, ev *Event) {
	body, err := json.Marshal(ev)
	if err != nil {
		return
	}
	wait := a.o.Backoff
	for attempt := 1; ; attempt++ {
		retry, err := a.post(ctx, pa, body)
		if err == nil {
			a.webhooks.WithLabelValues("delivered").Inc()
			return
		}
		if !retry || attempt >= a.o.MaxAttempts {
			a.webhooks.WithLabelValues("failed").Inc()
			a.log.Error("alarm: webhook not delivered", "id", ev.ID, "attempts", attempt, "err", err)
			return
		}
		// Full jitter over the doubling wait.
		d := time.Duration(rand.Int64N(int64(wait))) + wait/2
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// post sends one attempt; retry says whether another may succeed.
func (a *Alarms) post(ctx context.Context, pa *planAlarm, body []byte) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, pa.Webhook, strings.NewReader(string(body)))
	if err != nil {
		return false, fmt.Errorf("alarm: %w", err)
	}
	ts := strconv.FormatInt(a.o.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "floodgate-alarm/1")
	req.Header.Set("X-Floodgate-Timestamp", ts)
	req.Header.Set("X-Floodgate-Signature", Sign(pa.Secret, ts, body))
	resp, err := a.o.Client.Do(req)
	if err != nil {
		return true, fmt.Errorf("alarm: webhook: %w", err)
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return false, nil
	case resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode >= 500:
		return true, fmt.Errorf("alarm: webhook: %s", resp.Status)
	}
	return false, fmt.Errorf("alarm: webhook: %s", resp.Status)
}

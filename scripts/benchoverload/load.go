package main

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The tiers, lowest last, as the policy names them.
const (
	tierCritical = iota
	tierDefault
	tierSheddable
	numTiers
)

var tierNames = [numTiers]string{"critical", "default", "sheddable"}

// record is what became of one request.
type record struct {
	sent     time.Duration // when it was sent, from the start of the case
	latency  time.Duration // until its answer, or until it was given up
	status   int           // the answer's status; 0: none (timeout or error)
	upstream bool          // the answer came from the upstream
	retry    bool          // the answer had a Retry-After
	unsent   bool          // not sent: the generator had too many in flight
	tenant   uint8         // index in the case's tenant names
	tier     uint8
}

// shed reports whether the gateway refused the request itself.
func (r *record) shed() bool { return r.status == http.StatusServiceUnavailable && !r.upstream }

// ok reports whether the request was answered 2xx.
func (r *record) ok() bool { return r.status >= 200 && r.status < 300 }

// stream is one open-loop source: requests at a fixed rate, each from one
// of tenants (in turn) with a tier drawn from mix (weights, critical
// first).
type stream struct {
	rate    float64
	tenants []int // indexes in the case's tenant names
	mix     [numTiers]float64
}

// generator sends requests at fixed instants, whatever becomes of the ones
// sent before (an open loop: an overloaded server is not given time to
// catch up), through client, each bounded by timeout.
type generator struct {
	client      *http.Client
	timeout     time.Duration
	maxInflight int64
	inflight    atomic.Int64
	lag         atomic.Int64 // the most a request left after its instant, in nanoseconds, since the last run began
}

// run sends the streams to url for d and waits for every answer. The
// records of stream i are in the i-th slice, in the order sent. Each
// stream draws its tiers from its own generator seeded by seed and its
// index, so that every configuration sees the same sequence.
func (g *generator) run(ctx context.Context, url string, tenantNames []string, streams []stream, d time.Duration, seed uint64) [][]record {
	start := time.Now()
	g.lag.Store(0)
	out := make([][]record, len(streams))
	var wg sync.WaitGroup
	for i, s := range streams {
		n := int(s.rate * d.Seconds())
		out[i] = make([]record, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.stream(ctx, url, tenantNames, s, out[i], start, rand.New(rand.NewPCG(seed, uint64(i))), &wg)
		}()
	}
	wg.Wait()
	return out
}

func (g *generator) stream(ctx context.Context, url string, tenantNames []string, s stream, recs []record, start time.Time, rng *rand.Rand, wg *sync.WaitGroup) {
	total := s.mix[0] + s.mix[1] + s.mix[2]
	for i := range recs {
		at := start.Add(time.Duration(float64(i) / s.rate * float64(time.Second)))
		if wait := time.Until(at); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return
			}
		}
		if late := int64(time.Since(at)); late > g.lag.Load() {
			g.lag.Store(late)
		}
		r := &recs[i]
		r.tenant = uint8(s.tenants[i%len(s.tenants)])
		x := rng.Float64() * total
		switch {
		case x < s.mix[0]:
			r.tier = tierCritical
		case x < s.mix[0]+s.mix[1]:
			r.tier = tierDefault
		default:
			r.tier = tierSheddable
		}
		r.sent = time.Since(start)
		if g.inflight.Load() >= g.maxInflight {
			r.unsent = true
			continue
		}
		g.inflight.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer g.inflight.Add(-1)
			g.send(ctx, url, tenantNames[r.tenant], r)
		}()
	}
}

func (g *generator) send(ctx context.Context, url, tenant string, r *record) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	req.Header.Set("X-Tenant", tenant)
	req.Header.Set("X-Priority", tierNames[r.tier])
	t0 := time.Now()
	resp, err := g.client.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil {
			r.status = resp.StatusCode
			r.upstream = resp.Header.Get(upstreamHeader) != ""
			r.retry = resp.Header.Get("Retry-After") != ""
		}
	}
	r.latency = time.Since(t0)
}

// newClient is a client that keeps many connections alive to one host.
func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns:        16384,
		MaxIdleConnsPerHost: 16384,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}}
}

package algo

import (
	"math/rand/v2"
	"time"
)

// The simulated upstream of the adaptive limit's tests: an M/M/c queue. It
// has c servers, each serving one request at a time for an exponentially
// distributed service time, and an unbounded FIFO queue in front, so a
// request's latency is its service time while no more than c are in
// flight and grows with the queue beyond. The best limit is therefore c:
// the most in flight the upstream takes without queueing, and the fewest
// that keep it busy.
//
// Arrivals are Poisson, at load·c/service per second. The gateway in front
// admits through Adaptive.Acquire and refuses the rest at once. Time is
// simulated (integer nanoseconds), the random numbers come from a seeded
// PCG: a run is exact and repeatable.
type simUpstream struct {
	servers int
	service float64 // mean service time, ns
	busy    int
	done    []simReq // min-heap by completion instant
	queue   []simReq // the waiting requests
	qHead   int
}

type simReq struct {
	at, admitted int64
	tier         int // with tiers: the request's tier
	inflight     int // with tiers: in flight when it was admitted
}

func (u *simUpstream) push(r simReq) {
	u.done = append(u.done, r)
	for i := len(u.done) - 1; i > 0; {
		p := (i - 1) / 2
		if u.done[p].at <= u.done[i].at {
			break
		}
		u.done[p], u.done[i] = u.done[i], u.done[p]
		i = p
	}
}

func (u *simUpstream) pop() simReq {
	r := u.done[0]
	last := len(u.done) - 1
	u.done[0] = u.done[last]
	u.done = u.done[:last]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < last && u.done[l].at < u.done[m].at {
			m = l
		}
		if l+1 < last && u.done[l+1].at < u.done[m].at {
			m = l + 1
		}
		if m == i {
			break
		}
		u.done[m], u.done[i] = u.done[i], u.done[m]
		i = m
	}
	return r
}

type simPoint struct {
	at    int64
	limit int
}

type sim struct {
	rng  *rand.Rand
	a    *Adaptive
	up   simUpstream
	now  int64
	load float64 // offered load, in multiples of the capacity

	nextArrival int64
	nextTrace   int64
	trace       []simPoint

	offered, admitted, served int
	fast                      int // served within 4 service times

	// With tiers, admission is tiers.Admit against the adaptive limit,
	// arrivals are of tier t with probability mix[t], and the limit
	// learns through Sample.
	tiers        *Tiers
	mix          []float64
	inflight     int
	tierOffered  []int
	tierRefused  []int
	tierInflight []int
}

const simTraceStep = int64(10 * time.Millisecond)

func newSim(seed uint64, a *Adaptive, servers int, service time.Duration, load float64) *sim {
	s := &sim{rng: rand.New(rand.NewPCG(seed, 0x5eed)), a: a, load: load}
	s.up.servers, s.up.service = servers, float64(service)
	s.nextArrival = s.interarrival()
	return s
}

func (s *sim) interarrival() int64 {
	rate := s.load * float64(s.up.servers) / s.up.service // per ns
	return 1 + int64(s.rng.ExpFloat64()/rate)
}

func (s *sim) start(r simReq) {
	s.up.busy++
	r.at = s.now + 1 + int64(s.rng.ExpFloat64()*s.up.service)
	s.up.push(r)
}

// withTiers makes arrivals of tiers drawn from mix, admitted by ts.
func (s *sim) withTiers(ts Tiers, mix ...float64) {
	s.tiers, s.mix = &ts, mix
	s.tierOffered = make([]int, len(mix))
	s.tierRefused = make([]int, len(mix))
	s.tierInflight = make([]int, len(mix))
}

// setServers changes the upstream's capacity now; requests in service
// finish, and queued ones start on the servers that are free.
func (s *sim) setServers(c int) {
	s.up.servers = c
	s.fill()
	s.nextArrival = s.now + s.interarrival()
}

func (s *sim) fill() {
	for s.up.busy < s.up.servers && s.up.qHead < len(s.up.queue) {
		s.start(s.up.queue[s.up.qHead])
		s.up.qHead++
	}
	if s.up.qHead > 1024 && s.up.qHead*2 > len(s.up.queue) {
		s.up.queue = append(s.up.queue[:0], s.up.queue[s.up.qHead:]...)
		s.up.qHead = 0
	}
}

// run simulates until the instant end (ns of simulated time).
func (s *sim) run(end int64) error {
	for {
		next := s.nextArrival
		if len(s.up.done) > 0 && s.up.done[0].at < next {
			next = s.up.done[0].at
		}
		for s.nextTrace <= next && s.nextTrace <= end {
			s.trace = append(s.trace, simPoint{s.nextTrace, s.a.Limit()})
			s.nextTrace += simTraceStep
		}
		if next > end {
			s.now = end
			return nil
		}
		s.now = next
		if len(s.up.done) > 0 && s.up.done[0].at == next {
			r := s.up.pop()
			s.up.busy--
			rtt := s.now - r.admitted
			s.served++
			if float64(rtt) <= 4*s.up.service {
				s.fast++
			}
			if s.tiers != nil {
				s.inflight--
				s.tierInflight[r.tier]--
				if err := s.a.Sample(s.now, time.Duration(rtt), r.inflight, OutcomeOK); err != nil {
					return err
				}
			} else if err := s.a.Release(s.now, time.Duration(rtt), OutcomeOK); err != nil {
				return err
			}
			s.fill()
			continue
		}
		s.offered++
		if r, ok := s.arrive(); ok {
			s.admitted++
			if s.up.busy < s.up.servers {
				s.start(r)
			} else {
				s.up.queue = append(s.up.queue, r)
			}
		}
		s.nextArrival = s.now + s.interarrival()
	}
}

// arrive admits (or not) the request arriving now.
func (s *sim) arrive() (simReq, bool) {
	r := simReq{admitted: s.now}
	if s.tiers == nil {
		return r, s.a.Acquire()
	}
	u := s.rng.Float64()
	for r.tier < len(s.mix)-1 && u >= s.mix[r.tier] {
		u -= s.mix[r.tier]
		r.tier++
	}
	s.tierOffered[r.tier]++
	if !s.tiers.Admit(r.tier, s.a.Limit(), s.inflight) {
		s.tierRefused[r.tier]++
		s.a.Refused()
		return r, false
	}
	s.inflight++
	s.tierInflight[r.tier]++
	r.inflight = s.inflight
	return r, true
}

// between returns the lowest and highest limit traced in [from, to).
func (s *sim) between(from, to int64) (lo, hi int) {
	lo, hi = int(^uint(0)>>1), 0
	for _, p := range s.trace {
		if p.at >= from && p.at < to {
			lo, hi = min(lo, p.limit), max(hi, p.limit)
		}
	}
	return lo, hi
}

// settled returns how long after from the limit entered [lo, hi] to stay
// there until to, or -1 if it never did.
func (s *sim) settled(from, to int64, lo, hi float64) time.Duration {
	at := int64(-1)
	for _, p := range s.trace {
		if p.at < from || p.at >= to {
			continue
		}
		in := float64(p.limit) >= lo && float64(p.limit) <= hi
		switch {
		case !in:
			at = -1
		case at < 0:
			at = p.at
		}
	}
	if at < 0 {
		return -1
	}
	return time.Duration(at - from)
}

// setService changes the mean service time of the requests that start from
// now on: the upstream became slower (or faster) at the same concurrency.
func (s *sim) setService(d time.Duration) {
	s.up.service = float64(d)
	s.nextArrival = s.now + s.interarrival()
}

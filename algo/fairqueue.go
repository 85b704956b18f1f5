package algo

// Design note: fair queuing among tenants.
//
// Rule: deficit round robin (Shreedhar and Varghese) with a cost of one per
// item. Each tenant with items waiting has its own FIFO; the tenants with
// items form a ring, served in turn, each up to its weight (its quantum)
// per turn. So a tenant offering twenty times its share waits on its own
// backlog: another tenant's item waits at most one round (the quanta of the
// tenants ahead of it in the ring) for each item of its own ahead of it.
// A tenant joins the ring at the end of the current round.
//
// Shuffle sharding (as Kubernetes' API Priority and Fairness does) bounds
// memory with a fixed number of queues and hashes tenants onto them, at the
// price of tenants that share a queue sharing its fate. Here memory is
// bounded without hashing: only tenants with items waiting have a record,
// a tenant is forgotten the moment its last item leaves, so records, map
// entries and items are all bounded by Total whatever the number of
// tenants, and each tenant is queued alone.
//
// Bounds: Push refuses an item when its tenant has PerTenant waiting
// (ErrTenantFull) or the queue has Total (ErrQueueFull); it never evicts
// on its own (RemoveNewest and RemoveNewestOfLongest let a caller make
// room). A full queue that refuses every newcomer would let the tenants
// that filled it keep it full under a flood, their turns the only ones
// left; so Longest tells a caller the most items one tenant has waiting,
// and RemoveNewestOfLongest takes that tenant's newest, for a caller that
// gives its place to a tenant with fewer (longest queue drop, as fq_codel
// drops from its fattest flow).
// Items wait at most MaxWait: Pop and Expire hand those that waited longer
// to a function of the caller's, oldest first, so the caller answers them
// (a 503); nothing is dropped unseen. Remove takes out an item whose
// client left, by the Ticket its Push returned. PassOver sends the item
// whose turn it is to the end of its tenant's FIFO for a caller that will
// not serve that tenant now; it keeps its age (its deadline, and its
// place for RemoveNewest), which a Pop and a Push again would renew.
//
// Cost: items live in one pool of nodes in two intrusive lists (their
// tenant's FIFO, and all items in the order of their deadlines, which is
// the order of their pushes since MaxWait is one for all), and tenants in
// one list per number of items waiting, so Push, Pop, Next, PassOver,
// Remove, Longest and each expiry are O(1), RemoveNewestOfLongest is
// O(PerTenant), and none allocates once the pools and the map have grown
// to their peak.

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/floodgate/floodgate"
)

var (
	// ErrQueueFull reports a Push refused because the queue holds Total
	// items.
	ErrQueueFull = errors.New("algo: fair queue: full")
	// ErrTenantFull reports a Push refused because the tenant has
	// PerTenant items waiting.
	ErrTenantFull = errors.New("algo: fair queue: the tenant's backlog is full")
)

// maxWeight bounds a tenant's weight.
const maxWeight = 1 << 16

// FairQueueOptions configures a FairQueue. The zero value of every field is
// a useful default.
type FairQueueOptions[K comparable] struct {
	// Total is the most items waiting in all; 0 means 1024.
	Total int
	// PerTenant is the most items one tenant may have waiting; 0 means
	// an eighth of Total (at least 1). It is at most Total.
	PerTenant int
	// MaxWait is how long an item may wait; 0 means items never expire.
	MaxWait time.Duration
	// Weight returns a tenant's weight, the items it is served per turn,
	// when it starts waiting; nil means 1 for every tenant. It is clamped
	// to [1, 65536].
	Weight func(tenant K) int
}

// Ticket names an item pushed on a FairQueue, for Remove. The zero Ticket
// names nothing.
type Ticket struct {
	slot int32  // the node's index + 1
	gen  uint32 // the node's generation when pushed
}

// FairQueue is a bounded queue of items waiting by tenant, served by
// deficit round robin (see the design note at the top of fairqueue.go).
// It is a pure data structure: time is passed in and nothing runs on its
// own. It is not safe for concurrent use; callers hold a lock.
type FairQueue[K comparable, T any] struct {
	o FairQueueOptions[K]

	nodes    []fqNode[T]
	freeNode int32 // head of the free nodes, chained by next; -1 if none
	tenants  []fqTenant[K]
	freeTen  int32
	index    map[K]int32 // tenant → its record, while it has items waiting

	head, tail int32 // all items, oldest first (by prev/next in all)
	n          int   // items waiting
	active     int   // tenants with items waiting
	cur        int32 // the tenant being served; -1 if none
	credit     int   // what cur may still be served this turn
	last       int64 // the latest Push instant
	pushed     bool
	pushes     uint64 // the items pushed so far (fqNode.seq)
	// byLen[k] heads the list of the tenants with k items waiting (by
	// lprev/lnext), -1 if none; longest is the highest k with one.
	byLen   []int32
	longest int
}

type fqNode[T any] struct {
	item       T
	seq        uint64 // its push: the queue's pushes then
	deadline   int64
	tenant     int32
	prev, next int32 // in the tenant's FIFO (next also chains free nodes)
	aprev      int32 // in all items
	anext      int32
	gen        uint32
}

type fqTenant[K comparable] struct {
	key        K
	head, tail int32 // its FIFO
	n          int
	weight     int
	prev, next int32 // in the ring of waiting tenants (next chains free records)
	lprev      int32 // in byLen[n]
	lnext      int32
}

// NewFairQueue returns an empty queue, or an error wrapping
// floodgate.ErrInvalidLimit for options out of range.
func NewFairQueue[K comparable, T any](o FairQueueOptions[K]) (*FairQueue[K, T], error) {
	switch {
	case o.Total < 0 || o.Total > math.MaxInt32:
		return nil, fmt.Errorf("algo: fair queue: %w: total %d is not in [0, %d]", floodgate.ErrInvalidLimit, o.Total, math.MaxInt32)
	case o.PerTenant < 0:
		return nil, fmt.Errorf("algo: fair queue: %w: per tenant %d is negative", floodgate.ErrInvalidLimit, o.PerTenant)
	case o.MaxWait < 0:
		return nil, fmt.Errorf("algo: fair queue: %w: max wait %v is negative", floodgate.ErrInvalidLimit, o.MaxWait)
	}
	if o.Total == 0 {
		o.Total = 1024
	}
	if o.PerTenant == 0 {
		o.PerTenant = max(1, o.Total/8)
	}
	if o.PerTenant > o.Total {
		return nil, fmt.Errorf("algo: fair queue: %w: per tenant %d is above total %d", floodgate.ErrInvalidLimit, o.PerTenant, o.Total)
	}
	return &FairQueue[K, T]{
		o: o, freeNode: -1, freeTen: -1, index: make(map[K]int32),
		head: -1, tail: -1, cur: -1,
	}, nil
}

// Options returns the options in use, with the defaults filled in.
func (q *FairQueue[K, T]) Options() FairQueueOptions[K] { return q.o }

// Len returns the items waiting.
func (q *FairQueue[K, T]) Len() int { return q.n }

// Tenants returns the tenants with items waiting; the others are
// forgotten.
func (q *FairQueue[K, T]) Tenants() int { return q.active }

// TenantLen returns the items tenant has waiting.
func (q *FairQueue[K, T]) TenantLen(tenant K) int {
	if i, ok := q.index[tenant]; ok {
		return q.tenants[i].n
	}
	return 0
}

// Push adds item for tenant at instant now (Unix nanoseconds). It returns
// ErrTenantFull or ErrQueueFull if the tenant's or the queue's backlog is
// full, and floodgate.ErrTimeBackwards for a now before that of an earlier
// Push; then nothing changes. The Ticket names the item for Remove.
func (q *FairQueue[K, T]) Push(tenant K, item T, now int64) (Ticket, error) {
	if q.pushed && now < q.last {
		return Ticket{}, floodgate.ErrTimeBackwards
	}
	ti, known := q.index[tenant]
	if known && q.tenants[ti].n >= q.o.PerTenant {
		return Ticket{}, ErrTenantFull
	}
	if q.n >= q.o.Total {
		return Ticket{}, ErrQueueFull
	}
	q.pushed, q.last = true, now
	if !known {
		ti = q.newTenant(tenant)
	}
	ni := q.newNode()
	nd := &q.nodes[ni]
	q.pushes++
	nd.item, nd.tenant, nd.seq = item, ti, q.pushes
	nd.deadline = math.MaxInt64
	if q.o.MaxWait > 0 && now <= math.MaxInt64-int64(q.o.MaxWait) {
		nd.deadline = now + int64(q.o.MaxWait)
	}
	// The end of the tenant's FIFO.
	t := &q.tenants[ti]
	nd.prev, nd.next = t.tail, -1
	if t.tail >= 0 {
		q.nodes[t.tail].next = ni
	} else {
		t.head = ni
	}
	t.tail = ni
	if t.n > 0 {
		q.lenOut(ti)
	}
	t.n++
	q.lenIn(ti)
	// The end of all items.
	nd.aprev, nd.anext = q.tail, -1
	if q.tail >= 0 {
		q.nodes[q.tail].anext = ni
	} else {
		q.head = ni
	}
	q.tail = ni
	q.n++
	return Ticket{slot: ni + 1, gen: nd.gen}, nil
}

// Pop removes and returns the next item in turn, and false if none is
// waiting. It first takes out the items that have waited MaxWait or
// longer by now, oldest first, and hands each to expired (which may be
// nil): Pop never returns an item past its deadline.
func (q *FairQueue[K, T]) Pop(now int64, expired func(T)) (item T, ok bool) {
	q.Expire(now, expired)
	if q.cur < 0 {
		return item, false
	}
	ti := q.cur
	ni := q.tenants[ti].head
	item = q.nodes[ni].item
	q.credit--
	q.unlink(ni)
	if q.cur == ti && q.credit <= 0 {
		q.advance()
	}
	return item, true
}

// Expire takes out every item that has waited MaxWait or longer by now,
// oldest first, handing each to expired (which may be nil), and returns
// how many it took out. A now earlier than a Push's only expires less.
func (q *FairQueue[K, T]) Expire(now int64, expired func(T)) int {
	if q.o.MaxWait == 0 {
		return 0
	}
	k := 0
	for q.head >= 0 && q.nodes[q.head].deadline <= now {
		ni := q.head
		item := q.nodes[ni].item
		q.unlink(ni)
		k++
		if expired != nil {
			expired(item)
		}
	}
	return k
}

// Next returns the item whose turn it is, without taking it out, and
// false if none is waiting: the item Pop would return at now. Like Pop,
// it first takes out the items that have waited MaxWait or longer by now
// and hands each to expired (which may be nil).
func (q *FairQueue[K, T]) Next(now int64, expired func(T)) (item T, ok bool) {
	q.Expire(now, expired)
	if q.cur < 0 {
		return item, false
	}
	return q.nodes[q.tenants[q.cur].head].item, true
}

// PassOver passes over the item whose turn it is (the one Next returns),
// for a caller that will not serve its tenant now: the item goes to the
// end of its tenant's FIFO, and the turn to the next tenant in the ring,
// as if the tenant had been served its quantum. The item keeps its
// Ticket and its place among all items: its deadline, and its age for
// RemoveNewest, are those of its Push. PassOver does nothing when no item
// is waiting.
func (q *FairQueue[K, T]) PassOver() {
	if q.cur < 0 {
		return
	}
	t := &q.tenants[q.cur]
	if ni := t.head; t.n > 1 {
		nd := &q.nodes[ni]
		t.head = nd.next
		q.nodes[t.head].prev = -1
		nd.prev, nd.next = t.tail, -1
		q.nodes[t.tail].next = ni
		t.tail = ni
	}
	q.advance()
}

// Remove takes out the item that t names, if it is still waiting, and
// returns it.
func (q *FairQueue[K, T]) Remove(t Ticket) (item T, ok bool) {
	ni := t.slot - 1
	if ni < 0 || int(ni) >= len(q.nodes) || q.nodes[ni].gen != t.gen || q.nodes[ni].tenant < 0 {
		return item, false
	}
	item = q.nodes[ni].item
	q.unlink(ni)
	return item, true
}

// RemoveNewest takes out the item pushed last of those waiting, whatever
// its tenant, and returns it: the one that has waited least (an item
// passed over, PassOver, keeps the age of its Push), for a caller that
// makes room for a more urgent item.
func (q *FairQueue[K, T]) RemoveNewest() (item T, ok bool) {
	if q.tail < 0 {
		return item, false
	}
	ni := q.tail
	item = q.nodes[ni].item
	q.unlink(ni)
	return item, true
}

// Longest returns the most items one tenant has waiting, 0 when nothing
// waits.
func (q *FairQueue[K, T]) Longest() int { return q.longest }

// RemoveNewestOfLongest takes out the item pushed last of a tenant with
// the most items waiting (Longest), and returns it: that tenant's newest
// (an item passed over, PassOver, keeps the age of its Push), for a caller
// that makes room in a full queue for a tenant with fewer. It returns
// false when nothing waits.
func (q *FairQueue[K, T]) RemoveNewestOfLongest() (item T, ok bool) {
	if q.longest == 0 {
		return item, false
	}
	newest := q.tenants[q.byLen[q.longest]].head
	for ni := q.nodes[newest].next; ni >= 0; ni = q.nodes[ni].next {
		if q.nodes[ni].seq > q.nodes[newest].seq {
			newest = ni
		}
	}
	item = q.nodes[newest].item
	q.unlink(newest)
	return item, true
}

// lenIn puts tenant ti, which has items waiting, in the list of the
// tenants with as many.
func (q *FairQueue[K, T]) lenIn(ti int32) {
	t := &q.tenants[ti]
	for len(q.byLen) <= t.n {
		q.byLen = append(q.byLen, -1) // up to PerTenant + 1, once
	}
	t.lprev, t.lnext = -1, q.byLen[t.n]
	if t.lnext >= 0 {
		q.tenants[t.lnext].lprev = ti
	}
	q.byLen[t.n] = ti
	q.longest = max(q.longest, t.n)
}

// lenOut takes tenant ti out of the list of the tenants with as many
// items waiting (before its count changes).
func (q *FairQueue[K, T]) lenOut(ti int32) {
	t := &q.tenants[ti]
	if t.lprev >= 0 {
		q.tenants[t.lprev].lnext = t.lnext
	} else {
		q.byLen[t.n] = t.lnext
	}
	if t.lnext >= 0 {
		q.tenants[t.lnext].lprev = t.lprev
	}
}

// unlink takes node ni out of both lists and frees it; a tenant left with
// nothing is forgotten.
func (q *FairQueue[K, T]) unlink(ni int32) {
	nd := &q.nodes[ni]
	ti := nd.tenant
	t := &q.tenants[ti]
	if nd.prev >= 0 {
		q.nodes[nd.prev].next = nd.next
	} else {
		t.head = nd.next
	}
	if nd.next >= 0 {
		q.nodes[nd.next].prev = nd.prev
	} else {
		t.tail = nd.prev
	}
	q.lenOut(ti)
	t.n--
	if t.n > 0 {
		q.lenIn(ti)
	}
	for q.longest > 0 && q.byLen[q.longest] < 0 {
		q.longest--
	}
	if nd.aprev >= 0 {
		q.nodes[nd.aprev].anext = nd.anext
	} else {
		q.head = nd.anext
	}
	if nd.anext >= 0 {
		q.nodes[nd.anext].aprev = nd.aprev
	} else {
		q.tail = nd.aprev
	}
	q.n--
	var zero T
	nd.item, nd.tenant, nd.gen = zero, -1, nd.gen+1
	nd.next, q.freeNode = q.freeNode, ni
	if t.n == 0 {
		q.forget(ti)
	}
}

// newNode returns a free node, growing the pool (never past Total).
func (q *FairQueue[K, T]) newNode() int32 {
	if i := q.freeNode; i >= 0 {
		q.freeNode = q.nodes[i].next
		return i
	}
	q.nodes = append(grow(q.nodes, q.o.Total), fqNode[T]{})
	return int32(len(q.nodes) - 1)
}

// grow returns s with room for one more element, its capacity doubling
// but never past most (which len(s) is below).
func grow[E any](s []E, most int) []E {
	if len(s) < cap(s) {
		return s
	}
	n := make([]E, len(s), min(max(2*cap(s), 8), most))
	copy(n, s)
	return n
}

// newTenant makes a record for tenant and puts it at the end of the
// current round.
func (q *FairQueue[K, T]) newTenant(tenant K) int32 {
	ti := q.freeTen
	if ti >= 0 {
		q.freeTen = q.tenants[ti].next
	} else {
		q.tenants = append(grow(q.tenants, q.o.Total), fqTenant[K]{})
		ti = int32(len(q.tenants) - 1)
	}
	w := 1
	if q.o.Weight != nil {
		w = min(max(q.o.Weight(tenant), 1), maxWeight)
	}
	q.tenants[ti] = fqTenant[K]{key: tenant, head: -1, tail: -1, weight: w}
	q.index[tenant] = ti
	q.active++
	t := &q.tenants[ti]
	if q.cur < 0 {
		t.prev, t.next = ti, ti
		q.cur, q.credit = ti, w
		return ti
	}
	// Just before cur in the ring: served after every tenant waiting now.
	c := &q.tenants[q.cur]
	t.prev, t.next = c.prev, q.cur
	q.tenants[c.prev].next = ti
	c.prev = ti
	return ti
}

// forget drops the record of tenant ti, which has nothing waiting.
func (q *FairQueue[K, T]) forget(ti int32) {
	t := &q.tenants[ti]
	if q.cur == ti {
		q.advance()
	}
	if q.cur == ti { // it was alone
		q.cur = -1
	} else {
		q.tenants[t.prev].next = t.next
		q.tenants[t.next].prev = t.prev
	}
	delete(q.index, t.key)
	var zero K
	t.key, t.next, q.freeTen = zero, q.freeTen, ti
	q.active--
}

// advance passes the turn to the next tenant in the ring.
func (q *FairQueue[K, T]) advance() {
	q.cur = q.tenants[q.cur].next
	q.credit = q.tenants[q.cur].weight
}

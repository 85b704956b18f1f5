package identity

import (
	"container/heap"
	"hash/maphash"
	"sync"
	"time"
)

// DefaultTokenCacheSize is how many verified tokens a Resolver keeps.
const DefaultTokenCacheSize = 10000

// TokensPerUser is how many verified tokens of one user a Resolver keeps:
// a user's next token takes the place of the one that expires first (of
// those, the one kept longest). One account minting tokens, valid each,
// can then not push other users' tokens out of the cache (each of theirs
// would cost a verification again); a user with more devices than this
// pays a verification for the tokens past it.
const TokensPerUser = 8

// tokenCache keeps verified tokens until they expire, so that a client
// sending the same token again is not verified again. Only tokens that
// verified are kept (a flood of forged tokens cannot fill it with
// anything but nothing), each compared in full on a hit. It holds at most
// size entries, and TokensPerUser of one user; when full, it drops a
// token that has expired if there is one, else an arbitrary one (not the
// one that expires first: a flood of fresh tokens would then always push
// out the older tokens of the users it competes with).
type tokenCache struct {
	seed maphash.Seed
	size int

	mu    sync.Mutex // guards the fields below
	m     map[uint64]cachedToken
	users map[string][]uint64 // each user's tokens in m, by hash, oldest first
	due   tokenDue            // m's tokens by expiry, with stale entries
}

type cachedToken struct {
	token string
	user  string
	until time.Time // exp plus the leeway
}

func newTokenCache(size int) *tokenCache {
	if size <= 0 {
		size = DefaultTokenCacheSize
	}
	return &tokenCache{
		seed:  maphash.MakeSeed(),
		size:  size,
		m:     make(map[uint64]cachedToken),
		users: make(map[string][]uint64),
	}
}

// get returns the user of a cached token still valid at now.
func (c *tokenCache) get(token string, now time.Time) (string, bool) {
	h := maphash.String(c.seed, token)
	c.mu.Lock()
	e, ok := c.m[h]
	if ok && (e.token != token || !now.Before(e.until)) {
		if e.token == token {
			c.drop(h) // expired
		}
		ok = false
	}
	c.mu.Unlock()
	return e.user, ok
}

// put keeps a verified token of user until until. now is the time it was
// verified at: a token expired by then is dropped first when the cache is
// full.
func (c *tokenCache) put(token, user string, until, now time.Time) {
	h := maphash.String(c.seed, token)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[h]; ok {
		if e.token == token {
			return
		}
		c.drop(h) // another token with the same hash
	}
	if ks := c.users[user]; len(ks) >= TokensPerUser {
		first := ks[0]
		for _, k := range ks[1:] {
			if c.m[k].until.Before(c.m[first].until) {
				first = k
			}
		}
		c.drop(first)
	}
	if len(c.m) >= c.size {
		c.evict(now)
	}
	c.m[h] = cachedToken{token: token, user: user, until: until}
	c.users[user] = append(c.users[user], h)
	c.queue(h, until)
}

// evict drops a token that expired by now if there is one, else an
// arbitrary one (map order).
func (c *tokenCache) evict(now time.Time) {
	for len(c.due) > 0 {
		d := c.due[0]
		e, ok := c.m[d.h]
		if ok && e.until.Equal(d.until) {
			if !now.Before(d.until) {
				heap.Pop(&c.due)
				c.drop(d.h)
				return
			}
			break // the first to expire is live: so are all
		}
		heap.Pop(&c.due) // stale: dropped, or kept again since
	}
	for h := range c.m {
		c.drop(h)
		return
	}
}

// queue adds h, expiring at until, to the expiry queue, rebuilding it
// from m when stale entries outnumber the live ones.
func (c *tokenCache) queue(h uint64, until time.Time) {
	if len(c.due) >= 2*len(c.m)+64 {
		c.due = c.due[:0]
		for k, e := range c.m {
			c.due = append(c.due, dueToken{until: e.until, h: k})
		}
		heap.Init(&c.due)
		return // h is in m, so it is queued
	}
	heap.Push(&c.due, dueToken{until: until, h: h})
}

// drop removes the token h from m and from its user's list; its entry in
// the expiry queue goes stale.
func (c *tokenCache) drop(h uint64) {
	e, ok := c.m[h]
	if !ok {
		return
	}
	delete(c.m, h)
	ks := c.users[e.user]
	for i, k := range ks {
		if k == h {
			ks = append(ks[:i], ks[i+1:]...) // in the order they came
			break
		}
	}
	if len(ks) == 0 {
		delete(c.users, e.user)
	} else {
		c.users[e.user] = ks
	}
}

// tokenDue is a min-heap (container/heap) of cached tokens by expiry.
type tokenDue []dueToken

type dueToken struct {
	until time.Time
	h     uint64
}

func (q tokenDue) Len() int           { return len(q) }
func (q tokenDue) Less(i, j int) bool { return q[i].until.Before(q[j].until) }
func (q tokenDue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *tokenDue) Push(x any)        { *q = append(*q, x.(dueToken)) }
func (q *tokenDue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

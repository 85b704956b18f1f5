package redisstore

import (
	"math"
	"math/bits"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
)

// stride is the number of script arguments per hit (apply.lua's STRIDE).
const stride = 12

// ruleArgs is what the scripts need of one rule, turned into strings once.
type ruleArgs struct {
	alg     floodgate.Algorithm
	algStr  string
	twoKeys bool      // sliding log and concurrency use a ZSET and a hash
	params  [8]string // p1..p8; rate algorithms fill p5/p6 per cost
	lease   string    // the leaky queue's delay remainder (q in apply.lua's rule table)
	shadow  string    // "1" for a shadow rule
	cap     int64

	// Rate algorithms: cost·Per/Rate is computed per hit; T is the cost
	// of one unit.
	den, per uint64
	tNs      int64
	tRem     uint64

	// Quota: the boundaries around the last instant asked for.
	quota atomic.Pointer[quotaBounds]
	limit *floodgate.Limit
}

// quotaBounds caches the five period boundaries (µs) around an instant.
type quotaBounds struct {
	from, until int64 // valid while from ≤ now < until (ns)
	strs        [5]string
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// newRuleArgs precomputes the static arguments of a rule.
func newRuleArgs(r *limiter.Rule) *ruleArgs {
	lim := r.Limit()
	l := &lim
	ra := &ruleArgs{alg: l.Algorithm, algStr: strconv.Itoa(int(l.Algorithm)), cap: r.Params().Capacity(), lease: "0",
		shadow: "0", limit: l}
	if r.Shadow() {
		ra.shadow = "1"
	}
	switch l.Algorithm.Family() {
	case floodgate.FamilyRate:
		tauNs, tauRem, den := r.Params().Tolerance()
		tNs, tRem, _ := r.Params().Interval()
		ra.den, ra.per, ra.tNs, ra.tRem = den, uint64(l.Per), tNs, tRem
		ra.params = [8]string{
			strconv.FormatUint(den, 10), itoa(int64(l.Per)),
			itoa(tauNs), strconv.FormatUint(tauRem, 10),
			itoa(tNs), strconv.FormatUint(tRem, 10),
			itoa(ra.cap), "-1",
		}
		if l.Algorithm.Traits().Params.Has(floodgate.ParamDelay) && l.Delay != floodgate.NoDelay && l.Delay < ra.cap {
			hi, lo := bits.Mul64(uint64(l.Delay), ra.per)
			q, rem := bits.Div64(hi, lo, den) // fits: Compile checked it
			ra.params[7] = itoa(int64(q))
			ra.lease = strconv.FormatUint(rem, 10)
		}
	case floodgate.FamilyWindow:
		ra.params = [8]string{itoa(min(l.Max, MaxCount)), itoa(int64(l.Window)), "0", "0", "0", "0", "0", "0"}
		ra.twoKeys = l.Algorithm == floodgate.SlidingLog // a log keeps its members in a ZSET
	case floodgate.FamilyConcurrency:
		ttl := l.LeaseTTL
		if ttl == 0 {
			ttl = algo.DefaultLeaseTTL
		}
		ra.params = [8]string{itoa(min(l.Max, MaxCount)), itoa(int64(ttl)), itoa(int64(time.Second)), "0", "0", "0", "0", "0"}
		ra.twoKeys = true
	case floodgate.FamilyQuota:
		ra.params = [8]string{itoa(min(l.Max, MaxCount)), "", "", "", "", "", "0", itoa(l.Offset)}
		if l.Offset > 0 {
			start, _ := algo.QuotaPeriod(l, l.Start.UnixNano())
			ra.params[6] = itoa(start / 1000)
		}
	}
	return ra
}

// costT returns cost·Per/Rate of a rate algorithm as whole nanoseconds and
// a remainder in 1/Rate ns (T's for a cost beyond the capacity, which is
// never charged).
func (ra *ruleArgs) costT(cost int64) (int64, uint64) {
	if cost == 1 || cost < 1 || cost > ra.cap {
		return ra.tNs, ra.tRem
	}
	hi, lo := bits.Mul64(uint64(cost), ra.per)
	if hi >= ra.den {
		return math.MaxInt64 / 4, 0
	}
	q, rem := bits.Div64(hi, lo, ra.den)
	return int64(q), rem
}

// costArgs returns p5 and p6 of a rate algorithm for the cost: cost·Per/Rate
// as whole nanoseconds and a remainder in 1/Rate ns.
func (ra *ruleArgs) costArgs(cost int64) (string, string) {
	if cost == 1 || cost < 1 || cost > ra.cap {
		return ra.params[4], ra.params[5]
	}
	hi, lo := bits.Mul64(uint64(cost), ra.per)
	if hi >= ra.den {
		return itoa(math.MaxInt64 / 4), "0"
	}
	q, rem := bits.Div64(hi, lo, ra.den)
	return itoa(int64(q)), strconv.FormatUint(rem, 10)
}

// bounds returns the quota's five period boundaries in µs around now (Unix
// ns): the period before the one holding now, that one, and the next two
// boundaries after it, so that a server clock a period off either way
// still finds its period.
func (ra *ruleArgs) bounds(now int64) *[5]string {
	if b := ra.quota.Load(); b != nil && b.from <= now && now < b.until {
		return &b.strs
	}
	s1, e1 := algo.QuotaPeriod(ra.limit, now)
	s0, _ := algo.QuotaPeriod(ra.limit, s1-1)
	_, e2 := algo.QuotaPeriod(ra.limit, e1)
	_, e3 := algo.QuotaPeriod(ra.limit, e2)
	b := &quotaBounds{from: s1, until: e1}
	for i, v := range [5]int64{s0, s1, e1, e2, e3} {
		b.strs[i] = itoa(v / 1000)
	}
	ra.quota.Store(b)
	return &b.strs
}

// slot returns the Redis Cluster slot of key: CRC16 of the part between the
// first '{' and the next '}' when that part is not empty, else of the key.
func slot(key string) uint16 {
	if i := indexByte(key, '{'); i >= 0 {
		if j := indexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key)
}

// crc16 returns the Cluster slot of a hash tag (or of a whole key without
// one): its CRC16, modulo the 16384 slots.
func crc16(tag string) uint16 {
	var crc uint16
	for k := 0; k < len(tag); k++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^tag[k]]
	}
	return crc & 16383
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// crcTable is CRC16-CCITT (XMODEM), polynomial 0x1021, as Redis Cluster uses.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

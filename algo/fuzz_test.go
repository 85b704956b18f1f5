package algo

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

// The fuzz targets build a limit from the fuzzer's numbers, skip the ones
// Compile refuses, and replay a trace drawn from the fuzzer's seed through
// checkTrace, which checks every invariant of the contract sheet at every
// step: errors for bad costs and backward time, denials and peeks that
// change nothing, remaining within [0, capacity], the never-fits error,
// RetryAfter exactly the earliest passing instant, and a key as good as new
// at ResetAfter. The seed corpora keep `go test` runs short.

const fuzzSteps = 300

func fuzzTrace(t *testing.T, l floodgate.Limit, seed uint64) {
	p, err := Compile(&l)
	if err != nil {
		return
	}
	rng := rand.New(rand.NewPCG(seed, seed>>7|1))
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() + rng.Int64N(int64(400*24*time.Hour))
	checkTrace(t, &p, rng, fuzzSteps, start)
}

func FuzzRateAlgorithms(f *testing.F) {
	f.Add(uint8(0), int64(5), int64(time.Second), int64(10), int64(0), uint64(1))
	f.Add(uint8(1), int64(3), int64(time.Second), int64(1), int64(0), uint64(2))
	f.Add(uint8(2), int64(7), int64(2*time.Second), int64(4), int64(0), uint64(3))
	f.Add(uint8(3), int64(1), int64(time.Second), int64(12), int64(8), uint64(4))
	f.Add(uint8(3), int64(2), int64(time.Second), int64(5), int64(-1), uint64(5))
	f.Add(uint8(0), int64(1_000_000), int64(time.Second), int64(1), int64(0), uint64(6))
	f.Fuzz(func(t *testing.T, alg uint8, rate, per, burst, delay int64, seed uint64) {
		algs := []floodgate.Algorithm{floodgate.TokenBucket, floodgate.GCRA, floodgate.LeakyBucket, floodgate.LeakyQueue}
		l := floodgate.Limit{Algorithm: algs[int(alg)%len(algs)], Rate: rate, Per: time.Duration(per), Burst: burst % 100_000, Delay: delay}
		fuzzTrace(t, l, seed)
	})
}

func FuzzWindowAlgorithms(f *testing.F) {
	f.Add(uint8(0), int64(10), int64(time.Second), uint64(1))
	f.Add(uint8(1), int64(10), int64(1500*time.Millisecond), uint64(2))
	f.Add(uint8(2), int64(7), int64(333*time.Millisecond), uint64(3))
	f.Add(uint8(2), int64(1), int64(1), uint64(4))
	f.Fuzz(func(t *testing.T, alg uint8, limit, window int64, seed uint64) {
		algs := []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingLog, floodgate.SlidingWindow}
		l := floodgate.Limit{Algorithm: algs[int(alg)%len(algs)], Max: limit % 100_000, Window: time.Duration(window)}
		fuzzTrace(t, l, seed)
	})
}

func FuzzConcurrency(f *testing.F) {
	f.Add(int64(5), int64(2*time.Second), uint64(1))
	f.Add(int64(1), int64(0), uint64(2))
	f.Add(int64(100), int64(time.Millisecond), uint64(3))
	f.Fuzz(func(t *testing.T, limit, ttl int64, seed uint64) {
		l := floodgate.Limit{Algorithm: floodgate.Concurrency, Max: limit % 10_000, LeaseTTL: time.Duration(ttl)}
		fuzzTrace(t, l, seed)
	})
}

var fuzzZones = []string{"UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "Asia/Kolkata"}

func FuzzQuota(f *testing.F) {
	f.Add(uint8(1), uint8(1), int64(20), uint8(0), int64(0), int64(0), uint64(1))
	f.Add(uint8(2), uint8(3), int64(9), uint8(31), int64(4), int64(5000), uint64(2))
	f.Add(uint8(3), uint8(2), int64(100), uint8(15), int64(99), int64(-7000), uint64(3))
	f.Fuzz(func(t *testing.T, period, zone uint8, limit int64, anchor uint8, offset, startHours int64, seed uint64) {
		loc, err := time.LoadLocation(fuzzZones[int(zone)%len(fuzzZones)])
		if err != nil {
			t.Fatal(err)
		}
		l := floodgate.Limit{
			Algorithm: floodgate.Quota, Max: limit % 100_000, Period: floodgate.Period(period%3 + 1), Location: loc,
			AnchorDay: int(anchor % 32), Offset: offset,
			Start: time.Date(2026, 1, 1, 0, 0, 0, 0, loc).Add(time.Duration(startHours%20_000) * time.Hour),
		}
		if l.Period != floodgate.Month {
			l.AnchorDay = 0
		}
		fuzzTrace(t, l, seed)
		// Every period contains its instant and ends after it starts.
		rng := rand.New(rand.NewPCG(seed, 3))
		for range 50 {
			now := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() + rng.Int64N(int64(20*365*24*time.Hour))
			s, e := QuotaPeriod(&l, now)
			if !(s <= now && now < e) {
				t.Fatalf("%v: period [%d, %d) does not contain %d", l, s, e, now)
			}
			if s2, e2 := QuotaPeriod(&l, e); s2 != e || e2 <= e {
				t.Fatalf("%v: the period after [%d, %d) is [%d, %d)", l, s, e, s2, e2)
			}
		}
	})
}

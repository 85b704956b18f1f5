package floodgate_test

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

func TestAlgorithmNames(t *testing.T) {
	for _, a := range floodgate.Algorithms() {
		got, err := floodgate.ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
	}
	if len(floodgate.Algorithms()) != 9 {
		t.Errorf("%d algorithms, want 9", len(floodgate.Algorithms()))
	}
	if _, err := floodgate.ParseAlgorithm("token-bucket"); !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("unknown name: %v", err)
	}
	for s, want := range map[string]floodgate.Period{"DAY": floodgate.Day, "week": floodgate.Week, "Month": floodgate.Month} {
		if got, err := floodgate.ParsePeriod(s); err != nil || got != want {
			t.Errorf("ParsePeriod(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := floodgate.ParsePeriod("year"); err == nil {
		t.Error("year is a period")
	}
}

func TestKinds(t *testing.T) {
	want := map[floodgate.Algorithm]floodgate.Kind{
		floodgate.TokenBucket: floodgate.KindRate, floodgate.GCRA: floodgate.KindRate,
		floodgate.LeakyBucket: floodgate.KindRate, floodgate.FixedWindow: floodgate.KindRate,
		floodgate.SlidingLog: floodgate.KindRate, floodgate.SlidingWindow: floodgate.KindRate,
		floodgate.LeakyQueue: floodgate.KindQueue, floodgate.Concurrency: floodgate.KindConcurrency,
		floodgate.Quota: floodgate.KindQuota,
	}
	for a, k := range want {
		if a.Kind() != k {
			t.Errorf("%s: kind %s, want %s", a, a.Kind(), k)
		}
	}
}

func TestValidate(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	good := []floodgate.Limit{
		{Algorithm: floodgate.TokenBucket, Rate: 5, Per: time.Second, Burst: 10},
		{Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Second, Burst: 0, Delay: floodgate.NoDelay},
		{Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Minute},
		{Algorithm: floodgate.Concurrency, Max: 3},
		{Algorithm: floodgate.Quota, Max: 1000, Period: floodgate.Month, Location: berlin, AnchorDay: 15},
		{Algorithm: floodgate.Quota, Max: 10, Period: floodgate.Day, Offset: 4, Start: time.Unix(0, 0)},
	}
	for _, l := range good {
		if err := l.Validate(); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}
	bad := []floodgate.Limit{
		{},
		{Algorithm: floodgate.TokenBucket, Rate: 0, Per: time.Second, Burst: 1},
		{Algorithm: floodgate.TokenBucket, Rate: 5, Per: 0, Burst: 1},
		{Algorithm: floodgate.TokenBucket, Rate: 5, Per: time.Second, Burst: 0},
		{Algorithm: floodgate.TokenBucket, Rate: 2e9, Per: time.Second, Burst: 1},
		{Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Duration(math.MaxInt64), Burst: 1 << 40},
		{Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Second, Burst: -1},
		{Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Second, Burst: 1, Delay: -2},
		{Algorithm: floodgate.SlidingLog, Max: 0, Window: time.Second},
		{Algorithm: floodgate.SlidingWindow, Max: 1, Window: 0},
		{Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: -time.Second},
		{Algorithm: floodgate.Quota, Max: 1},
		{Algorithm: floodgate.Quota, Max: 1, Period: floodgate.Day, AnchorDay: 3},
		{Algorithm: floodgate.Quota, Max: 1, Period: floodgate.Month, AnchorDay: 32},
		{Algorithm: floodgate.Quota, Max: 5, Period: floodgate.Day, Offset: 6, Start: time.Unix(0, 0)},
		{Algorithm: floodgate.Quota, Max: 5, Period: floodgate.Day, Offset: 1},
	}
	for _, l := range bad {
		if err := l.Validate(); !errors.Is(err, floodgate.ErrInvalidLimit) {
			t.Errorf("%+v: %v, want ErrInvalidLimit", l, err)
		}
	}
}

func ExampleLimit_Validate() {
	l := floodgate.Limit{Name: "login", Algorithm: floodgate.SlidingLog, Max: 5, Window: 0}
	fmt.Println(l.Validate())
	l.Window = time.Minute
	fmt.Println(l.Validate(), l.Capacity(), l.Algorithm.Kind())
	// Output:
	// floodgate: invalid limit: login: window must be a positive duration, got 0s
	// <nil> 5 rate
}

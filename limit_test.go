package floodgate_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
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

// TestParamNames: every parameter has its file name, and parses back.
func TestParamNames(t *testing.T) {
	for p := range floodgate.AllParams.Each() {
		if q, ok := floodgate.ParseParam(p.String()); !ok || q != p || strings.Contains(p.String(), ",") {
			t.Errorf("parameter %d is named %q, which parses to %d, %t", p, p.String(), q, ok)
		}
	}
	if got := (floodgate.ParamRate | floodgate.ParamBurst).String(); got != "rate, burst" {
		t.Errorf("rate and burst: %q", got)
	}
}

func TestAlgorithmList(t *testing.T) {
	if got := floodgate.AlgorithmList(func(t *floodgate.Traits) bool { return t.Leasable }); got != "token_bucket, gcra, leaky_bucket and fixed_window" {
		t.Errorf("leasable: %q", got)
	}
	if got := floodgate.AlgorithmList(func(t *floodgate.Traits) bool { return t.Kind == floodgate.KindQuota }); got != "quota" {
		t.Errorf("quota kind: %q", got)
	}
	if got := floodgate.AlgorithmList(func(*floodgate.Traits) bool { return false }); got != "" {
		t.Errorf("none: %q", got)
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

// TestValidateNamesParam: every problem of Validate names the parameter at
// fault, so that a file can place it at that parameter's field.
func TestValidateNamesParam(t *testing.T) {
	epoch := time.Unix(0, 0)
	for _, tc := range []struct {
		l     floodgate.Limit
		param floodgate.Param
	}{
		{floodgate.Limit{}, 0},
		{floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: 0, Per: time.Second, Burst: 1}, floodgate.ParamRate},
		{floodgate.Limit{Algorithm: floodgate.GCRA, Rate: 5, Per: 0, Burst: 1}, floodgate.ParamPer},
		{floodgate.Limit{Algorithm: floodgate.LeakyBucket, Rate: 5, Per: time.Second, Burst: 0}, floodgate.ParamBurst},
		{floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: 2e9, Per: time.Second, Burst: 1}, floodgate.ParamRate},
		{floodgate.Limit{Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Duration(math.MaxInt64), Burst: 1 << 40}, floodgate.ParamBurst},
		{floodgate.Limit{Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Second, Burst: -1}, floodgate.ParamBurst},
		{floodgate.Limit{Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Second, Burst: 1, Delay: -2}, floodgate.ParamDelay},
		{floodgate.Limit{Algorithm: floodgate.FixedWindow, Max: 0, Window: time.Second}, floodgate.ParamMax},
		{floodgate.Limit{Algorithm: floodgate.SlidingWindow, Max: 1, Window: 0}, floodgate.ParamWindow},
		{floodgate.Limit{Algorithm: floodgate.Concurrency, Max: 0}, floodgate.ParamMax},
		{floodgate.Limit{Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: -time.Second}, floodgate.ParamLeaseTTL},
		{floodgate.Limit{Algorithm: floodgate.Concurrency, Max: 100, LeaseTTL: 2_100_000 * time.Hour}, floodgate.ParamLeaseTTL},
		{floodgate.Limit{Algorithm: floodgate.Concurrency, Max: 1, LeaseTTL: floodgate.MaxLeaseTTL + 1}, floodgate.ParamLeaseTTL},
		{floodgate.Limit{Algorithm: floodgate.Quota, Max: 1}, floodgate.ParamPeriod},
		{floodgate.Limit{Algorithm: floodgate.Quota, Max: 1, Period: 9}, floodgate.ParamPeriod},
		{floodgate.Limit{Algorithm: floodgate.Quota, Max: 1, Period: floodgate.Day, AnchorDay: 3}, floodgate.ParamAnchorDay},
		{floodgate.Limit{Algorithm: floodgate.Quota, Max: 1, Period: floodgate.Month, AnchorDay: 32}, floodgate.ParamAnchorDay},
		{floodgate.Limit{Algorithm: floodgate.Quota, Max: 5, Period: floodgate.Day, Offset: 6, Start: epoch}, floodgate.ParamOffset},
		{floodgate.Limit{Algorithm: floodgate.Quota, Max: 5, Period: floodgate.Day, Offset: -1, Start: epoch}, floodgate.ParamOffset},
		{floodgate.Limit{Algorithm: floodgate.Quota, Max: 5, Period: floodgate.Day, Offset: 1}, floodgate.ParamOffset},
	} {
		err := tc.l.Validate()
		var pe *floodgate.ParamError
		if !errors.As(err, &pe) || !errors.Is(err, floodgate.ErrInvalidLimit) {
			t.Errorf("%+v: %v, want a *ParamError that is ErrInvalidLimit", tc.l, err)
			continue
		}
		if pe.Param != tc.param {
			t.Errorf("%+v: %v names %q, want %q", tc.l, err, pe.Param, tc.param)
		}
	}
}

// TestProblemsOncePerMistake: every independent problem is reported, and
// a check that reads a parameter already wrong is not.
func TestProblemsOncePerMistake(t *testing.T) {
	for _, tc := range []struct {
		l    floodgate.Limit
		want []string
	}{
		{floodgate.Limit{Name: "r", Algorithm: floodgate.TokenBucket, Rate: 0, Per: 0, Burst: 0},
			[]string{"rate: rate must be at least 1, got 0", "per: per must be a positive duration, got 0s",
				"burst: burst must be at least 1, got 0"}},
		// Too fast, and the overflow check, which reads the rate, is left out.
		{floodgate.Limit{Name: "r", Algorithm: floodgate.TokenBucket, Rate: 2e9, Per: time.Second, Burst: 1 << 62},
			[]string{"rate: rate 2000000000 per 1s is faster than one unit a nanosecond"}},
		{floodgate.Limit{Name: "r", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Hour, Burst: 1 << 62},
			[]string{"burst: burst 4611686018427387904 at 1 per 1h0m0s overflows"}},
		// A bad period hides whether the anchor day needs a month.
		{floodgate.Limit{Name: "q", Algorithm: floodgate.Quota, Max: 0, Period: 0, AnchorDay: 15, Offset: 3}, []string{
			"limit: limit must be at least 1, got 0", "period: period is required: day, week or month",
			"offset: an offset needs a start (the date of the first period)"}},
		{floodgate.Limit{Name: "q", Algorithm: floodgate.Quota, Max: 2, Period: floodgate.Week, AnchorDay: 15, Offset: 3},
			[]string{"anchor_day: an anchor day needs a monthly period", "offset: offset must be between 0 and the limit 2, got 3"}},
		{floodgate.Limit{Name: "w", Algorithm: floodgate.SlidingLog}, []string{
			"limit: limit must be at least 1, got 0", "window: window must be a positive duration, got 0s"}},
		// Windows and leases in whole microseconds, as the Redis store
		// keeps their boundaries: a third of a second is refused there and
		// so everywhere (in process it was exact, on Redis its reset 85 ns
		// early and a request let through 8 ns before its window ended).
		{floodgate.Limit{Name: "w", Algorithm: floodgate.FixedWindow, Max: 5, Window: time.Second / 3},
			[]string{"window: window must be a whole number of microseconds, got 333.333333ms"}},
		{floodgate.Limit{Name: "w", Algorithm: floodgate.SlidingWindow, Max: 5, Window: time.Second + 100},
			[]string{"window: window must be a whole number of microseconds, got 1.0000001s"}},
		{floodgate.Limit{Name: "c", Algorithm: floodgate.Concurrency, Max: 5, LeaseTTL: time.Second / 3},
			[]string{"lease_ttl: lease ttl must be a whole number of microseconds, got 333.333333ms"}},
		{floodgate.Limit{Name: "w", Algorithm: floodgate.SlidingLog, Max: 5, Window: 1500 * time.Microsecond}, nil},
	} {
		var got []string
		for _, p := range tc.l.Problems() {
			got = append(got, p.Param.String()+": "+p.Msg)
			if p.Limit != tc.l.Name {
				t.Errorf("%+v: problem of limit %q", tc.l, p.Limit)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%+v:\n got %q\nwant %q", tc.l, got, tc.want)
		}
	}
}

func TestValidateCost(t *testing.T) {
	for _, tc := range []struct {
		l    floodgate.Limit
		cost int64
		want string
	}{
		{floodgate.Limit{Name: "a", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Second, Burst: 5}, 5, ""},
		{floodgate.Limit{Name: "a", Algorithm: floodgate.TokenBucket, Rate: 1, Per: time.Second, Burst: 5}, 6,
			"burst: burst 5 is below the cost 6: no request could ever pass"},
		// A queue holds one more: the request being served.
		{floodgate.Limit{Name: "q", Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Second, Burst: 2}, 3, ""},
		{floodgate.Limit{Name: "w", Algorithm: floodgate.FixedWindow, Max: 4, Window: time.Second}, 5,
			"limit: limit 4 is below the cost 5: no request could ever pass"},
		{floodgate.Limit{Name: "q", Algorithm: floodgate.Quota, Max: 4, Period: floodgate.Day}, 4, ""},
	} {
		err := tc.l.ValidateCost(tc.cost)
		var pe *floodgate.ParamError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v cost %d: %v", tc.l, tc.cost, err)
		case tc.want == "":
		case !errors.As(err, &pe):
			t.Errorf("%+v cost %d: %v, want %s", tc.l, tc.cost, err, tc.want)
		case pe.Param.String()+": "+pe.Msg != tc.want:
			t.Errorf("%+v cost %d: %s: %s, want %s", tc.l, tc.cost, pe.Param, pe.Msg, tc.want)
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

package algo

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

func loadLoc(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestQuotaPeriodDST(t *testing.T) {
	t.Parallel()
	berlin := loadLoc(t, "Europe/Berlin")
	ny := loadLoc(t, "America/New_York")
	cases := []struct {
		loc        *time.Location
		at         time.Time
		start, end time.Time
		hours      float64
	}{
		// Spring forward: 23-hour days.
		{berlin, time.Date(2026, 3, 29, 12, 0, 0, 0, berlin),
			time.Date(2026, 3, 29, 0, 0, 0, 0, berlin), time.Date(2026, 3, 30, 0, 0, 0, 0, berlin), 23},
		{ny, time.Date(2026, 3, 8, 1, 59, 0, 0, ny),
			time.Date(2026, 3, 8, 0, 0, 0, 0, ny), time.Date(2026, 3, 9, 0, 0, 0, 0, ny), 23},
		// Fall back: 25-hour days.
		{berlin, time.Date(2026, 10, 25, 23, 30, 0, 0, berlin),
			time.Date(2026, 10, 25, 0, 0, 0, 0, berlin), time.Date(2026, 10, 26, 0, 0, 0, 0, berlin), 25},
		{ny, time.Date(2026, 11, 1, 0, 0, 0, 0, ny),
			time.Date(2026, 11, 1, 0, 0, 0, 0, ny), time.Date(2026, 11, 2, 0, 0, 0, 0, ny), 25},
		// An ordinary day, a nanosecond before midnight.
		{ny, time.Date(2026, 11, 2, 23, 59, 59, 999999999, ny),
			time.Date(2026, 11, 2, 0, 0, 0, 0, ny), time.Date(2026, 11, 3, 0, 0, 0, 0, ny), 24},
	}
	for _, c := range cases {
		l := floodgate.Limit{Algorithm: floodgate.Quota, Max: 1, Period: floodgate.Day, Location: c.loc}
		s, e := QuotaPeriod(&l, c.at.UnixNano())
		if s != c.start.UnixNano() || e != c.end.UnixNano() {
			t.Errorf("%s %v: [%v, %v), want [%v, %v)", c.loc, c.at,
				time.Unix(0, s).In(c.loc), time.Unix(0, e).In(c.loc), c.start, c.end)
		}
		if h := time.Duration(e - s).Hours(); h != c.hours {
			t.Errorf("%s %v: a %v-hour day, want %v", c.loc, c.at, h, c.hours)
		}
	}
}

func TestQuotaPeriodWeek(t *testing.T) {
	t.Parallel()
	berlin := loadLoc(t, "Europe/Berlin")
	l := floodgate.Limit{Algorithm: floodgate.Quota, Max: 1, Period: floodgate.Week, Location: berlin}
	// Sunday 29 March 2026 (the DST day) belongs to the week of Monday 23
	// March; that week is 167 hours long.
	for _, at := range []time.Time{
		time.Date(2026, 3, 23, 0, 0, 0, 0, berlin),
		time.Date(2026, 3, 25, 12, 0, 0, 0, berlin),
		time.Date(2026, 3, 29, 23, 59, 0, 0, berlin),
	} {
		s, e := QuotaPeriod(&l, at.UnixNano())
		if s != time.Date(2026, 3, 23, 0, 0, 0, 0, berlin).UnixNano() || e != time.Date(2026, 3, 30, 0, 0, 0, 0, berlin).UnixNano() {
			t.Errorf("%v: [%v, %v)", at, time.Unix(0, s).In(berlin), time.Unix(0, e).In(berlin))
		}
		if h := time.Duration(e - s).Hours(); h != 167 {
			t.Errorf("%v: week of %v hours, want 167", at, h)
		}
	}
	// A week across a year boundary: ISO week 1 of 2027 starts Monday 4 Jan;
	// Friday 1 Jan 2027 is in the week of Monday 28 Dec 2026.
	s, _ := QuotaPeriod(&l, time.Date(2027, 1, 1, 9, 0, 0, 0, berlin).UnixNano())
	if want := time.Date(2026, 12, 28, 0, 0, 0, 0, berlin); s != want.UnixNano() {
		t.Errorf("1 Jan 2027: week starts %v, want %v", time.Unix(0, s).In(berlin), want)
	}
}

func TestQuotaPeriodMonth(t *testing.T) {
	t.Parallel()
	ny := loadLoc(t, "America/New_York")
	d := func(y int, m time.Month, day int) time.Time { return time.Date(y, m, day, 0, 0, 0, 0, ny) }
	cases := []struct {
		anchor     int
		at         time.Time
		start, end time.Time
	}{
		{0, time.Date(2026, 1, 31, 12, 0, 0, 0, ny), d(2026, 1, 1), d(2026, 2, 1)},
		{1, time.Date(2026, 2, 28, 23, 0, 0, 0, ny), d(2026, 2, 1), d(2026, 3, 1)},
		// Anchor 31: Jan 31 → Feb 28 → Mar 31 → Apr 30.
		{31, time.Date(2026, 2, 10, 0, 0, 0, 0, ny), d(2026, 1, 31), d(2026, 2, 28)},
		{31, time.Date(2026, 2, 28, 0, 0, 0, 0, ny), d(2026, 2, 28), d(2026, 3, 31)},
		{31, time.Date(2026, 3, 30, 23, 59, 0, 0, ny), d(2026, 2, 28), d(2026, 3, 31)},
		{31, time.Date(2026, 4, 15, 0, 0, 0, 0, ny), d(2026, 3, 31), d(2026, 4, 30)},
		// A leap year: February has 29 days.
		{31, time.Date(2028, 2, 29, 6, 0, 0, 0, ny), d(2028, 2, 29), d(2028, 3, 31)},
		{30, time.Date(2028, 2, 28, 6, 0, 0, 0, ny), d(2028, 1, 30), d(2028, 2, 29)},
		{29, time.Date(2027, 3, 1, 6, 0, 0, 0, ny), d(2027, 2, 28), d(2027, 3, 29)},
		// Across a year, and a month holding a DST change (8 March 2026).
		{15, time.Date(2027, 1, 3, 0, 0, 0, 0, ny), d(2026, 12, 15), d(2027, 1, 15)},
		{5, time.Date(2026, 3, 8, 12, 0, 0, 0, ny), d(2026, 3, 5), d(2026, 4, 5)},
	}
	for _, c := range cases {
		l := floodgate.Limit{Algorithm: floodgate.Quota, Max: 1, Period: floodgate.Month, Location: ny, AnchorDay: c.anchor}
		s, e := QuotaPeriod(&l, c.at.UnixNano())
		if s != c.start.UnixNano() || e != c.end.UnixNano() {
			t.Errorf("anchor %d at %v: [%v, %v), want [%v, %v)", c.anchor, c.at,
				time.Unix(0, s).In(ny), time.Unix(0, e).In(ny), c.start, c.end)
		}
	}
}

func TestQuotaDecisions(t *testing.T) {
	t.Parallel()
	berlin := loadLoc(t, "Europe/Berlin")
	l := floodgate.Limit{Algorithm: floodgate.Quota, Max: 3, Period: floodgate.Day, Location: berlin}
	p := mustCompile(t, l)
	var s State
	at := time.Date(2026, 3, 28, 22, 0, 0, 0, berlin) // two hours before a 23-hour day
	for i := range 3 {
		d, err := p.Decide(&s, Request{Now: at.UnixNano(), Cost: 1})
		if err != nil || !d.Allowed || d.Remaining != int64(2-i) || d.ResetAfter != 2*time.Hour {
			t.Fatalf("request %d: %+v %v", i+1, d, err)
		}
	}
	d, _ := p.Decide(&s, Request{Now: at.UnixNano(), Cost: 1})
	if d.Allowed || d.RetryAfter != 2*time.Hour || d.Remaining != 0 {
		t.Errorf("fourth: %+v, want RetryAfter 2h (local midnight)", d)
	}
	// The next day is 23 hours long: at its first instant the reset is 23h.
	next := time.Date(2026, 3, 29, 0, 0, 0, 0, berlin)
	d, _ = p.Decide(&s, Request{Now: next.UnixNano(), Cost: 3})
	if !d.Allowed || d.ResetAfter != 23*time.Hour {
		t.Errorf("next day: %+v", d)
	}
}

func TestQuotaOffset(t *testing.T) {
	t.Parallel()
	// AWS's offset: 400 of the 1,000 are taken from the first period (the
	// week that contains Start); later weeks have all 1,000.
	start := time.Date(2026, 6, 3, 15, 0, 0, 0, time.UTC) // a Wednesday
	l := floodgate.Limit{Algorithm: floodgate.Quota, Max: 1000, Period: floodgate.Week, Offset: 400, Start: start}
	p := mustCompile(t, l)
	var s State
	d, _ := p.Decide(&s, Request{Now: start.UnixNano(), Cost: 600})
	if !d.Allowed || d.Remaining != 0 || d.Limit != 1000 {
		t.Fatalf("first week: %+v", d)
	}
	d, _ = p.Decide(&s, Request{Now: start.UnixNano(), Cost: 1})
	monday := time.Date(2026, 6, 8, 0, 0, 0, 0, time.UTC)
	if d.Allowed || d.RetryAfter != monday.Sub(start) {
		t.Errorf("first week, one more: %+v, want RetryAfter until Monday", d)
	}
	d, _ = p.Decide(&s, Request{Now: monday.UnixNano(), Cost: 1000})
	if !d.Allowed || d.Remaining != 0 {
		t.Errorf("second week: %+v", d)
	}
	// A cost that fits a full week but not the first one waits for the
	// second week, and one above the limit never fits.
	var fresh State
	d, _ = p.Decide(&fresh, Request{Now: start.UnixNano(), Cost: 700})
	if d.Allowed || d.RetryAfter != monday.Sub(start) {
		t.Errorf("cost 700 in the first week: %+v", d)
	}
	// Start in the future: the weeks before it have the full limit; a cost
	// of 700 in the week before the start must wait two boundaries.
	before := start.Add(-7 * 24 * time.Hour)
	var s2 State
	if d, _ = p.Decide(&s2, Request{Now: before.UnixNano(), Cost: 1000}); !d.Allowed {
		t.Fatalf("week before the start: %+v", d)
	}
	d, _ = p.Decide(&s2, Request{Now: before.UnixNano(), Cost: 700})
	if want := monday.Sub(before); d.Allowed || d.RetryAfter != want {
		t.Errorf("cost 700 the week before the start: %+v, want RetryAfter %v", d, want)
	}
}

func TestQuotaPeriodMidnightSkipped(t *testing.T) {
	t.Parallel()
	// Chile moved its clocks from 00:00 to 01:00 on 8 September 2024: that
	// day starts at 01:00 local (04:00 UTC) and has 23 hours; the day before
	// ends at that same instant.
	santiago := loadLoc(t, "America/Santiago")
	l := floodgate.Limit{Algorithm: floodgate.Quota, Max: 1, Period: floodgate.Day, Location: santiago}
	dayStart := time.Date(2024, 9, 8, 4, 0, 0, 0, time.UTC).UnixNano()
	s, e := QuotaPeriod(&l, time.Date(2024, 9, 8, 12, 0, 0, 0, santiago).UnixNano())
	if s != dayStart || time.Duration(e-s) != 23*time.Hour {
		t.Errorf("8 Sep 2024: [%v, %v)", time.Unix(0, s).In(santiago), time.Unix(0, e).In(santiago))
	}
	_, e = QuotaPeriod(&l, time.Date(2024, 9, 7, 23, 30, 0, 0, santiago).UnixNano())
	if e != dayStart {
		t.Errorf("7 Sep 2024 ends %v, want %v", time.Unix(0, e).In(santiago), time.Unix(0, dayStart).In(santiago))
	}
}

package algo

import (
	"math"
	"time"

	"github.com/floodgate/floodgate"
)

// QuotaPeriod returns the calendar period of the quota l that contains the
// instant now (Unix ns) as [start, end) in Unix ns. Periods follow the wall
// clock of l.Location (UTC when nil): a DAY runs from local midnight to the
// next local midnight (23 or 25 hours across a DST change), a WEEK from
// Monday 00:00 (ISO 8601), a MONTH from 00:00 on l.AnchorDay (0 or 1: the
// 1st; an anchor past the end of a shorter month means its last day).
func QuotaPeriod(l *floodgate.Limit, now int64) (start, end int64) {
	loc := l.Location
	if loc == nil {
		loc = time.UTC
	}
	t := time.Unix(0, now).In(loc)
	y, m, d := t.Date()
	var s, e time.Time
	switch l.Period {
	case floodgate.Week:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		s = midnight(y, m, d-back, loc)
		e = midnight(y, m, d-back+7, loc)
	case floodgate.Month:
		s = anchorDate(y, m, l.AnchorDay, loc)
		if t.Before(s) {
			e = s
			s = anchorDate(y, m-1, l.AnchorDay, loc)
		} else {
			e = anchorDate(y, m+1, l.AnchorDay, loc)
		}
	default: // Day
		s = midnight(y, m, d, loc)
		e = midnight(y, m, d+1, loc)
	}
	start, end = s.UnixNano(), e.UnixNano()
	if e.After(lastInstant) {
		// The period ends past the last instant int64 nanoseconds hold
		// (2262-04-11): UnixNano would wrap around. It lasts to the end
		// of representable time.
		end = math.MaxInt64
	}
	// Never expected (midnight handles the zones that skip 00:00), but the
	// period must contain now whatever the zone database says.
	if start > now {
		start = now
	}
	if end <= now && now < math.MaxInt64 {
		end = now + 1
	}
	return start, end
}

// QuotaBoundary returns the boundary between two periods of the quota l
// (Unix ns) nearest to the instant at: the period end that a decision's
// ResetAfter, added to another clock than the store's, points at. A clock
// off from the store's by less than half a period names the same
// boundary, the calendar's own instant.
func QuotaBoundary(l *floodgate.Limit, at int64) int64 {
	start, end := QuotaPeriod(l, at)
	if at-start < end-at {
		return start
	}
	return end
}

// lastInstant is the last instant Unix nanoseconds in an int64 hold.
var lastInstant = time.Unix(0, math.MaxInt64)

// anchorDate returns 00:00 local on the anchor day of month m of year y (m
// may be out of 1..12 and is normalized), clamped to the month's last day.
func anchorDate(y int, m time.Month, anchor int, loc *time.Location) time.Time {
	first := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC) // normalizes y and m
	y, m = first.Year(), first.Month()
	days := time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
	day := min(max(anchor, 1), days)
	return midnight(y, m, day, loc)
}

// DayStart returns the first instant of the date y-m-d (normalized) in
// loc: 00:00, or the instant the day begins where a change of the clocks
// skips 00:00 (Havana and Santiago move from 00:00 to 01:00), for which
// time.Date may give an instant of the evening before. Quota periods
// begin at such instants.
func DayStart(y int, m time.Month, d int, loc *time.Location) time.Time {
	if loc == nil {
		loc = time.UTC
	}
	return midnight(y, m, d, loc)
}

// midnight returns the first instant of the local day y-m-d (normalized).
// That is 00:00, except where a DST change skips 00:00 (Chile, Lebanon,
// Paraguay, …): time.Date then may pick an instant of the evening before,
// and the day really starts at the transition.
func midnight(y int, m time.Month, d int, loc *time.Location) time.Time {
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	want := time.Date(y, m, d, 0, 0, 0, 0, time.UTC) // the normalized date
	if ty, tm, td := t.Date(); ty != want.Year() || tm != want.Month() || td != want.Day() {
		if _, end := t.ZoneBounds(); !end.IsZero() && end.After(t) {
			t = end
		}
	}
	return t
}

// quotaLimit is the limit of the period starting at start: Max, less Offset
// in the period that contains Limit.Start.
func (p *Params) quotaLimit(start int64) int64 {
	if p.offsetAmount > 0 && start == p.offsetStart {
		return p.max - p.offsetAmount
	}
	return p.max
}

// decideQuota counts units per calendar period. State: A = units counted,
// B = the period's start, C = its end (Unix ns; C = 0 for a fresh key).
func (p *Params) decideQuota(s *State, r Request, d *floodgate.Decision) error {
	d.Limit = p.max
	if r.Now == math.MaxInt64 {
		return ErrOverflow // no instant follows it to end a period
	}
	start, end, count := s.B, s.C, s.A
	if end == 0 || r.Now >= end || r.Now < start {
		start, end = QuotaPeriod(&p.limit, r.Now)
		count = 0
	}
	limit := p.quotaLimit(start)
	d.Remaining = max(0, limit-count)
	d.ResetAfter = dur(end - r.Now)
	if r.Cost > p.max {
		return floodgate.ErrNeverFits
	}
	if r.Cost > limit-count {
		// The first boundary after which the cost fits: the next period,
		// or the one after if the next carries the offset.
		b := end
		if end == p.offsetStart && r.Cost > p.quotaLimit(end) {
			_, b = QuotaPeriod(&p.limit, end)
		}
		d.RetryAfter = dur(b - r.Now)
		return nil
	}
	count += r.Cost
	d.Allowed = true
	d.Remaining = limit - count
	if !r.Peek {
		s.A, s.B, s.C, s.Last = count, start, end, r.Now
	}
	return nil
}

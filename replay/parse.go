package replay

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"
)

// errSkip marks a line that holds no request (a comment, a CSV header).
var errSkip = errors.New("replay: not a request")

// interner shares the strings that repeat from line to line (methods,
// routes, limits, key names, hosts) and the parsed client addresses, so
// that reading a log allocates little beyond its paths. It stops growing
// past a bound: a log of many distinct values then allocates them.
type interner struct {
	strs  map[string]string
	addrs map[string]netip.Addr
}

const (
	maxInterned      = 1 << 14
	maxInternedAddrs = 1 << 16
)

func newInterner() *interner {
	return &interner{strs: map[string]string{}, addrs: map[string]netip.Addr{}}
}

// str returns b as a string, shared with earlier equal ones.
func (in *interner) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if s, ok := in.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(in.strs) < maxInterned && len(b) <= 128 {
		in.strs[s] = s
	}
	return s
}

// addr parses a client address; "-" and empty give the zero Addr. A
// bracketed or port-suffixed address is accepted.
func (in *interner) addr(b []byte) (netip.Addr, error) {
	if len(b) == 0 || len(b) == 1 && b[0] == '-' {
		return netip.Addr{}, nil
	}
	if a, ok := in.addrs[string(b)]; ok {
		return a, nil
	}
	s := string(b)
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, perr := netip.ParseAddrPort(s)
		if perr != nil {
			return netip.Addr{}, errors.New("bad client address " + strconv.Quote(s))
		}
		a = ap.Addr()
	}
	a = a.Unmap()
	if len(in.addrs) < maxInternedAddrs {
		in.addrs[s] = a
	}
	return a, nil
}

// method returns the common methods without allocating.
func (in *interner) method(b []byte) string {
	switch string(b) {
	case "GET":
		return "GET"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "DELETE":
		return "DELETE"
	case "HEAD":
		return "HEAD"
	case "PATCH":
		return "PATCH"
	case "OPTIONS":
		return "OPTIONS"
	}
	return in.str(b)
}

// atoi parses a non-negative decimal integer.
func atoi(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// parseSeconds parses seconds with an optional fraction ("1.234",
// "1764496800.123456") into nanoseconds and the number of fraction
// digits.
func parseSeconds(b []byte) (ns int64, digits int, ok bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	i := 0
	for i < len(b) && b[i] != '.' {
		i++
	}
	sec, ok := atoi(b[:i])
	if !ok || sec > 1<<33 {
		return 0, 0, false
	}
	ns = sec * int64(time.Second)
	if i < len(b) {
		frac := b[i+1:]
		if len(frac) == 0 {
			return 0, 0, false
		}
		scale := int64(time.Second)
		for _, c := range frac {
			if c < '0' || c > '9' {
				return 0, 0, false
			}
			if scale > 1 {
				scale /= 10
				ns += int64(c-'0') * scale
			}
		}
		digits = len(frac)
	}
	if neg {
		ns = -ns
	}
	return ns, digits, true
}

// The times and durations a log may give. Times before 1970 cannot be
// replayed (the replay's clock starts there) and times past 2200 come
// near the end of Unix nanoseconds in an int64 (2262), where a time plus
// a duration would wrap; a line that gives one is unreadable, with its
// line number, rather than replayed at a wrapped time.
const (
	minYear = 1970
	maxYear = 2200 // the first year refused
	// maxTime is 2200-01-01T00:00:00Z in Unix nanoseconds.
	maxTime = int64(7258118400) * int64(time.Second)
	// maxDuration is the longest time a request may take to answer.
	maxDuration = 10 * 365 * 24 * time.Hour
)

// checkRange reports a record whose time or duration is outside the
// range a replay can represent.
func checkRange(rec *Record) error {
	if rec.Time < 0 || rec.Time >= maxTime {
		return fmt.Errorf("time %s out of range (%d to %d)", time.Unix(0, rec.Time).UTC().Format(time.RFC3339Nano), minYear, maxYear)
	}
	if rec.Duration < 0 || rec.Duration > maxDuration {
		return fmt.Errorf("duration %v out of range (0 to 10 years)", rec.Duration)
	}
	return nil
}

// daysFromCivil is the number of days from 1970-01-01 to y-m-d in the
// proleptic Gregorian calendar.
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

func num(b []byte) int64 {
	var n int64
	for _, c := range b {
		n = n*10 + int64(c-'0')
	}
	return n
}

func digitsAt(b []byte, pos ...int) bool {
	for _, p := range pos {
		if p >= len(b) || b[p] < '0' || b[p] > '9' {
			return false
		}
	}
	return true
}

// parseRFC3339 parses 2026-11-30T10:00:00.123456Z (any fraction, Z or an
// offset, T or a space) into Unix nanoseconds and the fraction digits.
func parseRFC3339(b []byte) (int64, int, bool) {
	if len(b) < 20 || b[4] != '-' || b[7] != '-' || (b[10] != 'T' && b[10] != ' ') || b[13] != ':' || b[16] != ':' ||
		!digitsAt(b, 0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18) {
		return fallbackTime(b)
	}
	y, mo, d := num(b[0:4]), num(b[5:7]), num(b[8:10])
	h, mi, s := num(b[11:13]), num(b[14:16]), num(b[17:19])
	if y < minYear-1 || y >= maxYear || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60 {
		return 0, 0, false
	}
	ns := (daysFromCivil(y, mo, d)*86400 + h*3600 + mi*60 + s) * int64(time.Second)
	rest := b[19:]
	digits := 0
	if len(rest) > 0 && (rest[0] == '.' || rest[0] == ',') {
		scale := int64(time.Second)
		i := 1
		for ; i < len(rest) && rest[i] >= '0' && rest[i] <= '9'; i++ {
			if scale > 1 {
				scale /= 10
				ns += int64(rest[i]-'0') * scale
			}
		}
		digits = i - 1
		rest = rest[i:]
	}
	switch {
	case len(rest) == 1 && (rest[0] == 'Z' || rest[0] == 'z'):
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':' && digitsAt(rest, 1, 2, 4, 5):
		off := (num(rest[1:3])*3600 + num(rest[4:6])*60) * int64(time.Second)
		if rest[0] == '+' {
			ns -= off
		} else {
			ns += off
		}
	default:
		return fallbackTime(b)
	}
	return ns, digits, true
}

func fallbackTime(b []byte) (int64, int, bool) {
	t, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil || t.Year() < minYear-1 || t.Year() >= maxYear {
		return 0, 0, false
	}
	digits := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '.' {
			for j := i + 1; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
				digits++
			}
			break
		}
	}
	return t.UnixNano(), digits, true
}

var monthAbbr = map[string]int64{"Jan": 1, "Feb": 2, "Mar": 3, "Apr": 4, "May": 5, "Jun": 6,
	"Jul": 7, "Aug": 8, "Sep": 9, "Oct": 10, "Nov": 11, "Dec": 12}

// parseTimeLocal parses NGINX's $time_local, 30/Nov/2026:10:00:00 +0000,
// into Unix nanoseconds.
func parseTimeLocal(b []byte) (int64, bool) {
	if len(b) != 26 || b[2] != '/' || b[6] != '/' || b[11] != ':' || b[14] != ':' || b[17] != ':' || b[20] != ' ' ||
		!digitsAt(b, 0, 1, 7, 8, 9, 10, 12, 13, 15, 16, 18, 19, 22, 23, 24, 25) || (b[21] != '+' && b[21] != '-') {
		return 0, false
	}
	mo, ok := monthAbbr[string(b[3:6])]
	if !ok {
		return 0, false
	}
	d, y := num(b[0:2]), num(b[7:11])
	if y < minYear-1 || y >= maxYear {
		return 0, false
	}
	h, mi, s := num(b[12:14]), num(b[15:17]), num(b[18:20])
	off := num(b[22:24])*3600 + num(b[24:26])*60
	if b[21] == '+' {
		off = -off
	}
	return (daysFromCivil(y, mo, d)*86400 + h*3600 + mi*60 + s + off) * int64(time.Second), true
}

package simulate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// arrival is one request of a simulated trace: an offset from the start of
// the simulation and a cost.
type arrival struct {
	at   int64 // ns after the start
	cost int64
	// instance is the instance the arrival goes to with --instances (1…N);
	// 0 means round robin.
	instance int
}

// burst is one item of --arrivals: count arrivals alike. A burst is kept
// as one item, never as its arrivals, so that '0*10000000' takes no more
// memory than '0'.
type burst struct {
	arrival
	count int64
}

// maxArrivals bounds a trace, so that a typo like *1e12 fails cleanly
// instead of exhausting memory.
const maxArrivals = 10_000_000

// parseArrivals parses 'AT[*COUNT][:COST][@INSTANCE],...': AT is a Go
// duration (0.5s, 100ms) or plain seconds (0.5), COUNT repeats the arrival
// (default 1), COST is its cost (default 1) and INSTANCE the instance it
// reaches with --instances (default: round robin). Times must not decrease.
func parseArrivals(spec string) ([]burst, error) {
	var out []burst
	var total int64
	last := int64(-1)
	for i, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("arrival %d is empty", i+1)
		}
		rest, instS, hasInst := strings.Cut(item, "@")
		atS, costS, hasCost := strings.Cut(rest, ":")
		atS, countS, hasCount := strings.Cut(atS, "*")
		at, err := parseOffset(strings.TrimSpace(atS))
		if err != nil {
			return nil, fmt.Errorf("arrival %d (%q): %w", i+1, item, err)
		}
		count, cost := int64(1), int64(1)
		if hasCount {
			if count, err = strconv.ParseInt(strings.TrimSpace(countS), 10, 64); err != nil || count < 1 {
				return nil, fmt.Errorf("arrival %d (%q): count must be a whole number ≥ 1", i+1, item)
			}
		}
		if hasCost {
			if cost, err = strconv.ParseInt(strings.TrimSpace(costS), 10, 64); err != nil || cost < 1 {
				return nil, fmt.Errorf("arrival %d (%q): cost must be a whole number ≥ 1", i+1, item)
			}
		}
		instance := 0
		if hasInst {
			n, err := strconv.ParseInt(strings.TrimSpace(instS), 10, 32)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("arrival %d (%q): instance must be a whole number ≥ 1", i+1, item)
			}
			instance = int(n)
		}
		if at < last {
			return nil, fmt.Errorf("arrival %d (%q): times must not decrease", i+1, item)
		}
		last = at
		if count > maxArrivals-total {
			return nil, fmt.Errorf("more than %d arrivals", maxArrivals)
		}
		total += count
		out = append(out, burst{arrival{at: at, cost: cost, instance: instance}, count})
	}
	return out, nil
}

// parseOffset reads a non-negative offset: a Go duration or plain seconds.
func parseOffset(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("missing time")
	}
	if ns, err := parseSeconds([]byte(s)); err == nil {
		return ns, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("time %q is neither seconds nor a Go duration", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("time %q is negative", s)
	}
	return int64(d), nil
}

var errSeconds = errors.New("not a number of seconds")

// parseSeconds reads plain decimal seconds ("12", "0.5", "3.000000001") as
// exact nanoseconds, without going through a float. At most nine decimals.
func parseSeconds(b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, errSeconds
	}
	var whole, frac int64
	i := 0
	digits := 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if whole > (math.MaxInt64/int64(time.Second)-9)/10 {
			return 0, errors.New("seconds out of range")
		}
		whole = whole*10 + int64(b[i]-'0')
		digits++
	}
	if i < len(b) && b[i] == '.' {
		i++
		scale := int64(time.Second)
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			if scale == 1 {
				return 0, errors.New("more than nine decimals (below a nanosecond)")
			}
			scale /= 10
			frac += int64(b[i]-'0') * scale
			digits++
		}
	}
	if i != len(b) || digits == 0 {
		return 0, errSeconds
	}
	return whole*int64(time.Second) + frac, nil
}

// maxLine is the longest line of a trace file, and maxQuote what an error
// quotes of it.
const (
	maxLine  = 1 << 20
	maxQuote = 64
)

// quote is b quoted for an error, cut after maxQuote bytes with its length
// said, so that an error never holds megabytes of a line.
func quote(b []byte) string {
	if len(b) <= maxQuote {
		return strconv.Quote(string(b))
	}
	return fmt.Sprintf("%q… (%d bytes)", b[:maxQuote], len(b))
}

// scanArrivals reads a trace file: one 'SECONDS [COST]' per line; blank
// lines and lines starting with # are skipped. Times must not decrease. It
// hands each arrival to fn as it reads it, holding none, and stops at the
// first error, fn's or the file's; an error names its line.
func scanArrivals(r io.Reader, fn func(a arrival) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxLine)
	n := 0
	last := int64(-1)
	line := 1
	for ; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		atB, costB := b, []byte(nil)
		if j := bytes.IndexAny(b, " \t"); j >= 0 {
			atB, costB = b[:j], bytes.TrimSpace(b[j+1:])
		}
		at, err := parseSeconds(atB)
		if err != nil {
			return fmt.Errorf("line %d: %s: %w", line, quote(b), err)
		}
		cost := int64(1)
		if len(costB) > 0 {
			if cost, err = parseInt(costB); err != nil || cost < 1 {
				return fmt.Errorf("line %d: cost %s must be a whole number ≥ 1", line, quote(costB))
			}
		}
		if at < last {
			return fmt.Errorf("line %d: times must not decrease", line)
		}
		last = at
		if n >= maxArrivals {
			return fmt.Errorf("line %d: more than %d arrivals", line, maxArrivals)
		}
		n++
		if err := fn(arrival{at: at, cost: cost}); err != nil {
			return err
		}
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return fmt.Errorf("line %d: longer than 1 MiB", line)
	} else if err != nil {
		return fmt.Errorf("line %d: %w", line, err)
	}
	return nil
}

// parseInt reads a decimal integer, optionally negative, without
// allocating.
func parseInt(b []byte) (int64, error) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, errors.New("not a whole number in range")
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, errors.New("not a whole number")
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, nil
}

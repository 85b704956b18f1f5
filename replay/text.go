package replay

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// sparkWidth is the most columns a sparkline takes.
const sparkWidth = 72

// WriteText writes the report for a terminal.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	var logs []string
	for _, l := range r.Logs {
		s := fmt.Sprintf("%s (%s, %s lines", shown(l.Name), l.Format, commas(l.Lines))
		if l.Skipped > 0 {
			s += fmt.Sprintf(", %s unreadable", commas(l.Skipped))
		}
		logs = append(logs, s+")")
	}
	fmt.Fprintf(&b, "replay of %s through %s\n", strings.Join(logs, ", "), r.Policy)
	for _, l := range r.Logs {
		for _, s := range l.Samples {
			fmt.Fprintf(&b, "  unreadable: %s\n", shown(s))
		}
	}
	if r.Requests == 0 {
		b.WriteString("no requests\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintf(&b, "%s → %s UTC (%s)\n", r.From.Format("2006-01-02 15:04:05.000"), r.To.Format("15:04:05.000"),
		r.To.Sub(r.From).Round(time.Millisecond))
	fmt.Fprintf(&b, "%s requests: %s allowed", commas(r.Requests), commas(r.Allowed))
	if r.Unlimited > 0 {
		fmt.Fprintf(&b, " (%s with no limit)", commas(r.Unlimited))
	}
	fmt.Fprintf(&b, ", %s denied (%s)", commas(r.Denied), percent(r.Denied, r.Requests))
	if r.Forbidden > 0 {
		fmt.Fprintf(&b, ", %s refused with 403 (API key)", commas(r.Forbidden))
	}
	if r.Answered > 0 {
		fmt.Fprintf(&b, ", %s answered before any limit (the gateway's own 400s, access lists, penalty box)", commas(r.Answered))
	}
	b.WriteString("\n\n")
	if slices.Contains(r.Unheld, "host") {
		b.WriteString("(the policy matches routes or limits by host, which no line of the logs holds: replayed as if no request named one)\n\n")
	}
	writeLimits(&b, r.Limits)
	writeAffected(&b, "clients refused most", r.TopClients)
	writeAffected(&b, "API keys refused most", r.TopKeys)
	writeTimeline(&b, r)
	if a := r.Agreement; a != nil {
		writeAgreement(&b, a)
	}
	if c := r.Compare; c != nil {
		writeComparison(&b, r, c)
	}
	if r.Late > 0 {
		fmt.Fprintf(&b, "%s records came later than the reorder window (at most %s late): replayed when the replay reached them; a wider --window puts them in order\n",
			commas(r.Late), time.Duration(r.MaxLate))
	}
	res := r.Resources
	fmt.Fprintf(&b, "replayed in %s: at most %s counters and %s records held, %.1f MB of heap\n",
		time.Duration(res.Elapsed).Round(time.Millisecond), commas(int64(res.PeakKeys)), commas(int64(res.PeakHeld)),
		float64(res.PeakHeapBytes)/(1<<20))
	_, err := io.WriteString(w, b.String())
	return err
}

func writeLimits(b *strings.Builder, limits []LimitReport) {
	rows := [][]string{{"limit", "scope", "algorithm", "seen", "allowed", "denied", "binding", "denials from – to"}}
	shadow := false
	for _, l := range limits {
		name := l.Name
		if l.Shadow {
			name += "*"
			shadow = true
		}
		when := "-"
		if n := len(l.Episodes); n > 0 {
			when = l.Episodes[0].Start.Format("15:04:05") + " – " + l.Episodes[n-1].End.Format("15:04:05")
			if runs := n + l.EpisodesLeftOut; runs > 1 {
				when += fmt.Sprintf(" (%d runs)", runs)
			}
		}
		rows = append(rows, []string{name, l.Scope, l.Algorithm, commas(l.Seen), commas(l.Allowed),
			commas(l.Denied), commas(l.Binding), when})
	}
	writeTable(b, "", rows, []bool{false, false, false, true, true, true, true, false})
	if shadow {
		b.WriteString("(* shadow: counted, never enforced; its denials are the ones it would make)\n")
	}
	for _, l := range limits {
		if len(l.Unheld) > 0 {
			fmt.Fprintf(b, "(%s is keyed by %s, which no line of the logs holds: replayed as if no request carried it)\n",
				l.Name, strings.Join(l.Unheld, ", "))
		}
	}
	b.WriteString("\n")
}

// writeTable writes rows in columns two spaces apart, right-aligning the
// columns marked so, each line after indent.
func writeTable(b *strings.Builder, indent string, rows [][]string, right []bool) {
	var width []int
	for _, row := range rows {
		for i, c := range row {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for _, row := range rows {
		var line strings.Builder
		line.WriteString(indent)
		for i, c := range row {
			if i > 0 {
				line.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i < len(right) && right[i] {
				line.WriteString(pad + c)
			} else if i < len(row)-1 {
				line.WriteString(c + pad)
			} else {
				line.WriteString(c)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
}

func writeAffected(b *strings.Builder, title string, as []Affected) {
	if len(as) == 0 {
		return
	}
	fmt.Fprintf(b, "%s:\n", title)
	var rows [][]string
	for _, a := range as {
		n := commas(a.Denied)
		if a.Error > 0 {
			n = "≤" + n
		}
		rows = append(rows, []string{shown(a.Name), n, a.Limit, a.First.Format("15:04:05") + " – " + a.Last.Format("15:04:05")})
	}
	writeTable(b, "  ", rows, []bool{false, true, false, false})
	b.WriteString("\n")
}

func writeTimeline(b *strings.Builder, r *Report) {
	tl := r.Timeline
	if tl == nil || len(tl.Requests) == 0 {
		return
	}
	per := (len(tl.Requests) + sparkWidth - 1) / sparkWidth
	span := time.Duration(tl.Width) * time.Duration(per)
	end := tl.Start.Add(time.Duration(tl.Width) * time.Duration(len(tl.Requests)))
	fmt.Fprintf(b, "per %s, %s → %s UTC:\n", perLabel(span), tl.Start.Format("15:04"), end.Format("15:04"))
	rows := []struct {
		name string
		v    []int64
	}{{"requests", tl.Requests}, {"denied", tl.Denied}}
	for i, l := range r.Limits {
		if l.Denied > 0 && i < len(tl.Limits) {
			name := l.Name
			if l.Shadow {
				name += "*"
			}
			rows = append(rows, struct {
				name string
				v    []int64
			}{name, tl.Limits[i]})
		}
	}
	var table [][]string
	for _, row := range rows {
		cols := group(row.v, per)
		var peak int64
		for _, v := range cols {
			peak = max(peak, v)
		}
		table = append(table, []string{row.name, "│" + Sparkline(cols) + "│", "peak " + commas(peak)})
	}
	writeTable(b, "  ", table, nil)
	b.WriteString("\n")
}

// group sums v in runs of per.
func group(v []int64, per int) []int64 {
	if per <= 1 {
		return v
	}
	out := make([]int64, 0, (len(v)+per-1)/per)
	for i := 0; i < len(v); i += per {
		var s int64
		for _, x := range v[i:min(i+per, len(v))] {
			s += x
		}
		out = append(out, s)
	}
	return out
}

// Sparkline draws values as a line of block characters, scaled to the
// largest: a space for zero, ▁ for the smallest non-zero values.
func Sparkline(v []int64) string {
	const blocks = "▁▂▃▄▅▆▇█"
	var peak int64
	for _, x := range v {
		peak = max(peak, x)
	}
	var b strings.Builder
	for _, x := range v {
		if x <= 0 || peak == 0 {
			b.WriteByte(' ')
			continue
		}
		i := int((x*8 - 1) / peak)
		r := []rune(blocks)[min(i, 7)]
		b.WriteRune(r)
	}
	return b.String()
}

func writeAgreement(b *strings.Builder, a *Agreement) {
	fmt.Fprintf(b, "against the decisions in the log: %s of %s the same (%s)", commas(a.Matched), commas(a.Compared),
		percentFine(a.Matched, a.Compared))
	if d := a.Compared - a.Matched; d > 0 {
		fmt.Fprintf(b, "; %s differ (%s refused here, allowed there; %s the other way):\n", commas(d), commas(a.ReplayDenied), commas(a.ReplayAllowed))
		fmt.Fprintf(b, "  %s at a refill or window boundary (within %s, then charged as logged), %s reordered within %s, %s unexplained\n",
			commas(a.Boundary), time.Duration(a.Tolerance), commas(a.Reordered), time.Duration(a.Tolerance), commas(a.Unexplained))
		for _, m := range a.Mismatches {
			fmt.Fprintf(b, "  %s %s %s %s", m.Time.Format("15:04:05.000000"), orDash(m.ClientIP), shown(m.Method), shown(m.Path))
			if m.Key != "" {
				fmt.Fprintf(b, " key %s", shown(m.Key))
			}
			fmt.Fprintf(b, ": log %s", m.Logged)
			if m.LoggedLimit != "" {
				fmt.Fprintf(b, " (%s)", shown(m.LoggedLimit))
			}
			fmt.Fprintf(b, ", replay %s", m.Replay)
			if m.ReplayLimit != "" {
				fmt.Fprintf(b, " (%s)", m.ReplayLimit)
			}
			fmt.Fprintf(b, " [%s; %s earlier: %s, later: %s] %s:%d\n", m.Class, time.Duration(a.Tolerance), m.Before, m.After, shown(m.Log), m.Line)
		}
	} else {
		b.WriteString("\n")
	}
	if a.Shed > 0 {
		fmt.Fprintf(b, "  %s shed by overload control in the log (503): reported as logged, not simulated\n", commas(a.Shed))
	}
	if a.Degraded > 0 {
		fmt.Fprintf(b, "  %s decided by failure policies while the store failed: not compared\n", commas(a.Degraded))
	}
	b.WriteString("\n")
}

func writeComparison(b *strings.Builder, r *Report, c *Comparison) {
	answered := ""
	if c.Answered > 0 {
		answered = fmt.Sprintf(", %s answered before any limit", commas(c.Answered))
	}
	fmt.Fprintf(b, "%s instead of %s: %s allowed, %s denied%s; %s requests flip (%s): %s allowed → denied, %s denied → allowed\n",
		c.Policy, r.Policy, commas(c.Allowed), commas(c.Denied), answered, commas(c.Flips), percentFine(c.Flips, r.Requests),
		commas(c.ToDenied), commas(c.ToAllowed))
	if len(c.Groups) > 0 {
		rows := [][]string{{"flip", "limit", "client", "count", "from – to", "first request"}}
		for _, g := range c.Groups {
			dir := "allowed → denied"
			if g.Direction == "to_allowed" {
				dir = "denied → allowed"
			}
			ex := ""
			if len(g.Examples) > 0 {
				e := g.Examples[0]
				ex = fmt.Sprintf("%s %s (%s:%d)", shown(e.Method), shown(e.Path), shown(e.Log), e.Line)
			}
			rows = append(rows, []string{dir, g.Limit, shown(g.Client), commas(g.Count),
				g.First.Format("15:04:05") + " – " + g.Last.Format("15:04:05"), ex})
		}
		writeTable(b, "  ", rows, []bool{false, false, false, true, false, false})
		if c.GroupsLeftOut > 0 {
			fmt.Fprintf(b, "  and %s more flips in smaller groups\n", commas(c.GroupsLeftOut))
		}
	}
	b.WriteString("\n")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// commas writes n with thousands separators.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func percent(n, of int64) string {
	if of == 0 {
		return "0%"
	}
	return strconv.FormatFloat(100*float64(n)/float64(of), 'f', 1, 64) + "%"
}

// percentFine shows rates near 100% with enough digits to tell 99.9 from
// 99.99.
func percentFine(n, of int64) string {
	if of == 0 {
		return "100%"
	}
	p := 100 * float64(n) / float64(of)
	digits := 1
	for d := 100 - p; digits < 4 && d > 0 && d < 0.1*pow10(1-digits); digits++ {
	}
	return strconv.FormatFloat(p, 'f', digits, 64) + "%"
}

func pow10(e int) float64 {
	p := 1.0
	for ; e > 0; e-- {
		p *= 10
	}
	for ; e < 0; e++ {
		p /= 10
	}
	return p
}

// perLabel names a bucket's width: minute, 5 minutes, 2h8m0s.
func perLabel(d time.Duration) string {
	switch {
	case d == time.Minute:
		return "minute"
	case d == time.Hour:
		return "hour"
	case d%time.Minute == 0 && d < time.Hour:
		return fmt.Sprintf("%d minutes", d/time.Minute)
	}
	return d.String()
}

// shown returns s as the reports show a string a log gave (a path, a
// method, a key's name, an unreadable line's error): each character a
// reader cannot see or that acts on the text around it (controls such as
// a terminal's escape sequences, bidi overrides and isolates, zero-width
// and other default-ignorable characters, line and paragraph separators)
// written out as ⟨U+202E⟩, and each byte that is not UTF-8 as ⟨0xFF⟩, so
// that a client's choice reads as what it is, neither driving the
// operator's terminal nor reordering a page.
func shown(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || hidden(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, "⟨0x%02X⟩", s[i])
		case hidden(r):
			fmt.Fprintf(&b, "⟨U+%04X⟩", r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// hidden reports a character a reader cannot see or that reorders or
// controls the text around it.
func hidden(r rune) bool {
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Other_Default_Ignorable_Code_Point,
		unicode.Variation_Selector)
}

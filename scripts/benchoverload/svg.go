package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// series is one line of a panel: values at x = xs[i], or x0 + i*dx
// without xs (NaN: no value).
type series struct {
	name   string
	color  string
	dashed bool
	x0, dx float64
	xs     []float64
	values []float64
}

func (s *series) x(i int) float64 {
	if s.xs != nil {
		return s.xs[i]
	}
	return s.x0 + float64(i)*s.dx
}

// panel is one chart of a figure, with time on the x axis.
type panel struct {
	name  string // for the data-panel attribute
	title string
	unit  string
	log   bool // a logarithmic y axis
	lines []series
}

// figure is panels stacked over one time axis of xmax seconds.
type figure struct {
	title string
	xmax  float64
	panel []panel
}

const (
	svgWidth    = 760
	panelHeight = 190
	marginLeft  = 64
	marginRight = 130
	marginTop   = 36
	panelGap    = 46
)

// writeSVG draws f as a standalone SVG document.
func (f *figure) writeSVG(w io.Writer) error {
	var b strings.Builder
	height := marginTop + len(f.panel)*(panelHeight+panelGap) + 10
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", marginLeft, esc(f.title))
	for i := range f.panel {
		top := marginTop + i*(panelHeight+panelGap) + 14
		f.drawPanel(&b, &f.panel[i], float64(top))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func (f *figure) drawPanel(b *strings.Builder, p *panel, top float64) {
	left := float64(marginLeft)
	plotW := float64(svgWidth - marginLeft - marginRight)
	plotH := float64(panelHeight)
	lo, hi := yRange(p)
	y := func(v float64) float64 {
		if p.log {
			return top + plotH - (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*plotH
		}
		return top + plotH - (v-lo)/(hi-lo)*plotH
	}
	x := func(t float64) float64 { return left + t/f.xmax*plotW }

	fmt.Fprintf(b, `<g class="panel" data-panel="%s">`+"\n", esc(p.name))
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", left, top-6, esc(p.title))
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n", left, top, plotW, plotH)
	for _, v := range yTicks(lo, hi, p.log) {
		yy := y(v)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, yy, left+plotW, yy)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-4, yy+4, esc(tickLabel(v)))
	}
	for _, t := range xTicks(f.xmax) {
		xx := x(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", xx, top, xx, top+plotH)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", xx, top+plotH+14, esc(tickLabel(t)))
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">s</text>`+"\n", left+plotW, top+plotH+28)
	fmt.Fprintf(b, `<text x="12" y="%.1f" transform="rotate(-90 12 %.1f)" text-anchor="middle">%s</text>`+"\n",
		top+plotH/2, top+plotH/2, esc(p.unit))
	for i, s := range p.lines {
		var pts []string
		flush := func() {
			if len(pts) > 0 {
				dash := ""
				if s.dashed {
					dash = ` stroke-dasharray="5 4"`
				}
				fmt.Fprintf(b, `<polyline data-series="%s" fill="none" stroke="%s" stroke-width="1.6"%s points="%s"/>`+"\n",
					esc(s.name), s.color, dash, strings.Join(pts, " "))
			}
			pts = pts[:0]
		}
		for k, v := range s.values {
			if math.IsNaN(v) || (p.log && v <= 0) {
				flush()
				continue
			}
			v = math.Max(math.Min(v, hi), lo)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.x(k)), y(v)))
		}
		flush()
		ly := top + 12 + float64(i)*16
		lx := left + plotW + 10
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="5 4"`
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", lx, ly-4, lx+18, ly-4, s.color, dash)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+24, ly, esc(s.name))
	}
	b.WriteString("</g>\n")
}

// yRange is the panel's y axis: from 0 (or, on a log axis, a power of ten
// below the smallest value, so that no line runs along the axis) to a
// little above the largest value.
func yRange(p *panel) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range p.lines {
		for _, v := range s.values {
			if math.IsNaN(v) || (p.log && v <= 0) {
				continue
			}
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if math.IsInf(hi, -1) {
		lo, hi = 1, 10
	}
	if p.log {
		lo = math.Pow(10, math.Floor(math.Log10(lo*0.8)))
		hi = math.Pow(10, math.Ceil(math.Log10(hi*1.05)))
		if hi <= lo {
			hi = lo * 10
		}
		return lo, hi
	}
	lo = 0
	if hi <= 0 {
		hi = 1
	}
	return lo, niceCeil(hi * 1.08)
}

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func yTicks(lo, hi float64, log bool) []float64 {
	var out []float64
	if log {
		for d := lo; d <= hi*1.0001; d *= 10 {
			out = append(out, d)
			if 3*d < hi {
				out = append(out, 3*d)
			}
		}
		return out
	}
	step := niceCeil(hi / 5)
	for v := lo; v <= hi*1.0001; v += step {
		out = append(out, v)
	}
	return out
}

func xTicks(xmax float64) []float64 {
	step := niceCeil(xmax / 8)
	var out []float64
	for t := 0.0; t <= xmax*1.0001; t += step {
		out = append(out, t)
	}
	return out
}

func tickLabel(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%g", v)
}

func esc(s string) string { return html.EscapeString(s) }

// The configurations' colors.
var configColor = map[string]string{
	configNone:     "#888888",
	configFixed:    "#1f77b4",
	configAdaptive: "#d62728",
}

// caseFigure draws a case's goodput, admitted p99, limit and the requests
// the upstream held over time, one line per configuration, with the
// capacity, the objective and the best limit (the workers) as dashed
// references.
func (r *results) caseFigure(name, title string) *figure {
	var runs []*caseResult
	for _, c := range r.cases {
		if c.spec.name == name {
			runs = append(runs, c)
		}
	}
	if len(runs) == 0 {
		return nil
	}
	spec := runs[0].spec
	good := panel{name: "goodput", title: "Goodput (2xx within the objective)", unit: "requests/s"}
	lat := panel{name: "latency", title: "p99 latency of admitted requests (log scale)", unit: "ms", log: true}
	lim := panel{name: "limit", title: "Limit on requests in flight (scraped every 250 ms)", unit: "requests"}
	held := panel{name: "upstream", title: "Requests the upstream held at once, queued or served (the most per 250 ms, log scale)", unit: "requests", log: true}
	capX, capacity := r.stepLine(spec, r.cal.capacityAt)
	bestX, best := r.stepLine(spec, func(w int) float64 { return float64(w) })
	obj := ms(r.cal.objective())
	// The references first, so that the measured lines are drawn over them.
	good.lines = append(good.lines, series{name: "capacity", color: "#000000", dashed: true, xs: capX, values: capacity})
	lat.lines = append(lat.lines,
		series{name: "objective", color: "#000000", dashed: true, x0: 0, dx: spec.duration.Seconds(), values: []float64{obj, obj}},
		series{name: "2× no-load p99", color: "#2ca02c", dashed: true, x0: 0, dx: spec.duration.Seconds(), values: []float64{2 * ms(r.cal.p99), 2 * ms(r.cal.p99)}})
	lim.lines = append(lim.lines, series{name: "best (workers)", color: "#000000", dashed: true, xs: bestX, values: best})
	held.lines = append(held.lines, series{name: "workers", color: "#000000", dashed: true, xs: bestX, values: best})
	for _, c := range runs {
		g, p := perSecond(c.recs, spec.duration, r.cal.objective())
		good.lines = append(good.lines, series{name: c.config, color: configColor[c.config], x0: 0.5, dx: 1, values: g})
		lat.lines = append(lat.lines, series{name: c.config, color: configColor[c.config], x0: 0.5, dx: 1, values: p})
		xs := make([]float64, 0, len(c.samples))
		vals := make([]float64, 0, len(c.samples))
		up := make([]float64, 0, len(c.samples))
		for _, s := range c.samples {
			if s.at > spec.duration {
				break // the answers to the last requests, after the load
			}
			xs = append(xs, s.at.Seconds())
			vals = append(vals, s.limit)
			up = append(up, float64(s.upstream))
		}
		if c.config != configNone {
			lim.lines = append(lim.lines, series{name: c.config, color: configColor[c.config], xs: xs, values: vals})
		}
		held.lines = append(held.lines, series{name: c.config, color: configColor[c.config], xs: xs, values: up})
	}
	return &figure{title: title, xmax: spec.duration.Seconds(), panel: []panel{good, lat, lim, held}}
}

// stepLine is f of the upstream's workers over the case, as the corners of
// a step function.
func (r *results) stepLine(spec *caseSpec, f func(workers int) float64) (xs, ys []float64) {
	steps := spec.schedule
	if len(steps) == 0 {
		steps = []capStep{{0, r.cal.workers}}
	}
	for i, st := range steps {
		end := spec.duration
		if i+1 < len(steps) {
			end = steps[i+1].at
		}
		v := f(st.workers)
		xs = append(xs, st.at.Seconds(), end.Seconds())
		ys = append(ys, v, v)
	}
	return xs, ys
}

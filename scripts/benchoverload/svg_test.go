package main

import (
	"encoding/xml"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// svgSeries parses an SVG document and returns, per panel, the names of
// its polylines in order (one name per run of points).
func svgSeries(t *testing.T, doc string) map[string][]string {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	out := map[string][]string{}
	panel := ""
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not XML: %v\n%s", err, doc)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if root == "" {
			root = se.Name.Space + " " + se.Name.Local
		}
		attr := map[string]string{}
		for _, a := range se.Attr {
			attr[a.Name.Local] = a.Value
		}
		switch se.Name.Local {
		case "g":
			panel = attr["data-panel"]
		case "polyline":
			if attr["points"] == "" {
				t.Errorf("a polyline of %s in %s has no points", attr["data-series"], panel)
			}
			if !slices.Contains(out[panel], attr["data-series"]) {
				out[panel] = append(out[panel], attr["data-series"])
			}
		}
	}
	if root != "http://www.w3.org/2000/svg svg" {
		t.Errorf("root element %q, want svg in the SVG namespace", root)
	}
	return out
}

func TestCaseFigureDrawsEveryConfigurationAndTheReferences(t *testing.T) {
	r := synthetic()
	spec := &caseSpec{name: "step", duration: 30 * time.Second, tenants: []string{"t1", "t2"}, heavy: -1,
		schedule: []capStep{{0, 10}, {10 * time.Second, 5}, {20 * time.Second, 10}}}
	var lim []sample
	for i := range 120 {
		lim = append(lim, sample{at: time.Duration(i) * 250 * time.Millisecond, limit: float64(5 + i%7), upstream: int64(1 + i)})
	}
	r.cases = []*caseResult{
		{spec: spec, config: configNone, recs: steady(30*time.Second, 20, 3*time.Second, tierDefault, 0, 0), samples: lim},
		{spec: spec, config: configFixed, recs: steady(30*time.Second, 80, 90*time.Millisecond, tierDefault, 5, tierSheddable), samples: lim},
		{spec: spec, config: configAdaptive, recs: steady(30*time.Second, 90, 60*time.Millisecond, tierDefault, 5, tierSheddable), samples: lim},
	}
	f := r.caseFigure("step", `Step <& "halved">`)
	if f == nil {
		t.Fatal("no figure for a case that ran")
	}
	var b strings.Builder
	if err := f.writeSVG(&b); err != nil {
		t.Fatal(err)
	}
	got := svgSeries(t, b.String())
	want := map[string][]string{
		"goodput":  {"capacity", "none", "fixed", "adaptive"},
		"latency":  {"objective", "2× no-load p99", "none", "fixed", "adaptive"},
		"limit":    {"best (workers)", "fixed", "adaptive"},
		"upstream": {"workers", "none", "fixed", "adaptive"},
	}
	for p, w := range want {
		if !slices.Equal(got[p], w) {
			t.Errorf("panel %s: series %v, want %v", p, got[p], w)
		}
	}
	if !strings.Contains(b.String(), "Step &lt;&amp; &#34;halved&#34;&gt;") {
		t.Error("the title is not escaped")
	}
	if r.caseFigure("3x", "") != nil {
		t.Error("a figure for a case that did not run")
	}
}

func TestSeriesWithGapsBreakTheLine(t *testing.T) {
	f := &figure{title: "t", xmax: 4, panel: []panel{{name: "p", log: true, lines: []series{
		{name: "a", color: "#000", x0: 0, dx: 1, values: []float64{10, nan, 0, 100, 1000}},
	}}}}
	var b strings.Builder
	if err := f.writeSVG(&b); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), `<polyline data-series="a"`); n != 2 {
		t.Errorf("%d polylines, want 2 (a NaN and a zero on a log axis break the line)", n)
	}
	svgSeries(t, b.String())
}

func TestYRange(t *testing.T) {
	lo, hi := yRange(&panel{lines: []series{{values: []float64{3, 290, nan}}}})
	if lo != 0 || hi != 500 {
		t.Errorf("linear range %v..%v, want 0..500", lo, hi)
	}
	lo, hi = yRange(&panel{log: true, lines: []series{{values: []float64{52, 5012}}}})
	if lo != 10 || hi != 10000 {
		t.Errorf("log range %v..%v, want 10..10000", lo, hi)
	}
	lo, hi = yRange(&panel{lines: []series{{values: []float64{nan}}}})
	if lo != 0 || hi <= lo {
		t.Errorf("empty range %v..%v", lo, hi)
	}
}

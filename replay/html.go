package replay

import (
	"fmt"
	"html/template"
	"io"
	"strings"
	"time"
)

// WriteHTML writes the report as one self-contained HTML page: styles and
// charts (inline SVG) included, nothing loaded from elsewhere.
func (r *Report) WriteHTML(w io.Writer) error {
	if err := reportPage.Execute(w, r); err != nil {
		return fmt.Errorf("replay: html: %w", err)
	}
	return nil
}

// chartColors are the series colours of the charts, limit by limit.
// (Red is left to the denials' bars.)
var chartColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#393b79"}

var reportPage = template.Must(template.New("report").Funcs(template.FuncMap{
	"commas":   commas,
	"percent":  percent,
	"fine":     percentFine,
	"clock":    func(t time.Time) string { return t.Format("15:04:05") },
	"stamp":    func(t time.Time) string { return t.Format("2006-01-02 15:04:05.000") },
	"micro":    func(t time.Time) string { return t.Format("15:04:05.000000") },
	"dur":      func(d Duration) string { return time.Duration(d).Round(time.Millisecond).String() },
	"per":      func(d Duration) string { return perLabel(time.Duration(d)) },
	"span":     func(a, b time.Time) string { return b.Sub(a).Round(time.Millisecond).String() },
	"mb":       func(b uint64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) },
	"timeline": timelineSVG,
	"bar":      limitBar,
	"color":    func(i int) string { return chartColors[i%len(chartColors)] },
	"i64":      func(i int) int64 { return int64(i) },
	"sub":      func(a, b int64) int64 { return a - b },
	"shown":    shown,
}).Parse(reportHTML))

// timelineSVG draws requests (grey bars), denials (red bars) and each
// denying limit's own denials (lines) per bucket.
func timelineSVG(r *Report) template.HTML {
	tl := r.Timeline
	if tl == nil || len(tl.Requests) == 0 {
		return ""
	}
	const W, H, left, bottom, top = 960.0, 260.0, 56.0, 28.0, 12.0
	n := len(tl.Requests)
	var peak int64 = 1
	for _, v := range tl.Requests {
		peak = max(peak, v)
	}
	bw := (W - left - 8) / float64(n)
	y := func(v int64) float64 { return top + (H-top-bottom)*(1-float64(v)/float64(peak)) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %.0f %.0f" width="100%%" role="img" aria-label="requests and denials per bucket">`, W, H)
	for i := 0; i <= 4; i++ {
		v := peak * int64(i) / 4
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" class="grid"/><text x="%.1f" y="%.1f" class="axis" text-anchor="end">%s</text>`,
			left, W-8, y(v), y(v), left-6, y(v)+4, commas(v))
	}
	for i, v := range tl.Requests {
		x := left + float64(i)*bw
		fmt.Fprintf(&b, `<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" class="req"><title>%s: %s requests, %s denied</title></rect>`,
			x, y(v), max(bw-0.5, 0.5), H-bottom-y(v), bucketTime(tl, i), commas(v), commas(tl.Denied[i]))
		if d := tl.Denied[i]; d > 0 {
			fmt.Fprintf(&b, `<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" class="den"/>`, x, y(d), max(bw-0.5, 0.5), H-bottom-y(d))
		}
	}
	for li, l := range r.Limits {
		if l.Denied == 0 || li >= len(tl.Limits) {
			continue
		}
		var pts []string
		for i, v := range tl.Limits[li] {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", left+(float64(i)+0.5)*bw, y(v)))
		}
		dash := ""
		if l.Shadow {
			dash = ` stroke-dasharray="4 3"`
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"%s><title>%s</title></polyline>`,
			strings.Join(pts, " "), chartColors[li%len(chartColors)], dash, template.HTMLEscapeString(l.Name))
	}
	ticks := min(n, 8)
	for i := 0; i < ticks; i++ {
		k := i * (n - 1) / max(ticks-1, 1)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" class="axis" text-anchor="middle">%s</text>`, left+(float64(k)+0.5)*bw, H-8, bucketTime(tl, k))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func bucketTime(tl *Timeline, i int) string {
	return tl.Start.Add(time.Duration(tl.Width) * time.Duration(i)).Format("15:04")
}

// limitBar draws a limit's allowed and denied shares.
func limitBar(l LimitReport) template.HTML {
	if l.Seen == 0 {
		return ""
	}
	const W = 160.0
	den := W * float64(l.Denied) / float64(l.Seen)
	cls := "den"
	if l.Shadow {
		cls = "shadow"
	}
	return template.HTML(fmt.Sprintf(`<svg width="%.0f" height="12" viewBox="0 0 %.0f 12"><rect width="%.0f" height="12" class="ok"/><rect x="%.2f" width="%.2f" height="12" class="%s"/></svg>`,
		W, W, W, W-den, den, cls))
}

const reportHTML = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Floodgate replay: {{.Policy}}</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1000px;color:#222;padding:0 1rem}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
.sub{color:#666}.cards{display:flex;gap:1rem;flex-wrap:wrap;margin:1rem 0}
.card{border:1px solid #ddd;border-radius:6px;padding:.6rem 1rem;min-width:8rem}.card b{display:block;font-size:1.3rem}
table{border-collapse:collapse;width:100%;margin:.5rem 0}th,td{padding:.25rem .5rem;border-bottom:1px solid #eee;text-align:left;vertical-align:middle}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}code{font-size:.9em}
svg .grid{stroke:#eee}svg .axis{font-size:11px;fill:#666}svg .req{fill:#cfd8e3}svg .den,.den{fill:#d62728}
svg .ok{fill:#cfe3cf}svg .shadow{fill:#f0a35e}.legend span{display:inline-block;margin-right:1rem}
.legend i{display:inline-block;width:12px;height:3px;margin-right:4px;vertical-align:middle}
.bad{color:#b00}.good{color:#070}
</style></head><body>
<h1>Replay through <code>{{.Policy}}</code></h1>
<div class="sub">{{range $i, $l := .Logs}}{{if $i}}, {{end}}<code>{{shown $l.Name}}</code> ({{$l.Format}}, {{commas $l.Lines}} lines{{if $l.Skipped}}, {{commas $l.Skipped}} unreadable{{end}}){{end}}
{{if .Requests}}<br>{{stamp .From}} → {{stamp .To}} UTC ({{span .From .To}}){{end}}</div>
{{range .Logs}}{{range .Samples}}<div class="sub bad">unreadable: {{shown .}}</div>{{end}}{{end}}
<div class="cards">
<div class="card">requests<b>{{commas .Requests}}</b></div>
<div class="card">allowed<b>{{commas .Allowed}}</b></div>
<div class="card">denied<b class="bad">{{commas .Denied}}</b>{{percent .Denied .Requests}}</div>
{{if .Forbidden}}<div class="card">403 (API key)<b>{{commas .Forbidden}}</b></div>{{end}}
{{if .Answered}}<div class="card">answered before any limit<b>{{commas .Answered}}</b></div>{{end}}
{{with .Agreement}}<div class="card">as in the log<b class="{{if .Unexplained}}bad{{else}}good{{end}}">{{fine .Matched .Compared}}</b>{{commas .Matched}} of {{commas .Compared}}</div>{{end}}
{{with .Compare}}<div class="card">flips<b class="bad">{{commas .Flips}}</b>with {{.Policy}}</div>{{end}}
</div>

<h2>Requests and denials over time</h2>
{{timeline .}}
<div class="legend"><span><i style="background:#cfd8e3;height:10px"></i>requests</span><span><i style="background:#d62728;height:10px"></i>denied</span>
{{range $i, $l := .Limits}}{{if $l.Denied}}<span><i style="background:{{color $i}}"></i>{{$l.Name}}{{if $l.Shadow}} (shadow){{end}}</span>{{end}}{{end}}</div>
{{with .Timeline}}<div class="sub">one bar per {{per .Width}}</div>{{end}}

<h2>Limits, in evaluation order</h2>
{{range .Unheld}}{{if eq . "host"}}<div class="sub bad">The policy matches routes or limits by host, which no line of the logs holds: replayed as if no request named one.</div>{{end}}{{end}}
<table><tr><th>limit</th><th>scope</th><th>algorithm</th><th class="n">seen</th><th class="n">allowed</th><th class="n">denied</th><th class="n">binding</th><th></th><th>denials</th></tr>
{{range .Limits}}<tr><td><code>{{.Name}}</code>{{if .Shadow}} <span class="sub">shadow</span>{{end}}</td><td>{{.Scope}}</td><td>{{.Algorithm}}</td>
<td class="n">{{commas .Seen}}</td><td class="n">{{commas .Allowed}}</td><td class="n">{{commas .Denied}}</td><td class="n">{{commas .Binding}}</td><td>{{bar .}}</td>
<td>{{range $i, $e := .Episodes}}{{if lt $i 3}}{{clock $e.Start}}–{{clock $e.End}} ({{commas $e.Denied}})<br>{{end}}{{end}}{{if gt (len .Episodes) 3}}<span class="sub">and {{sub (i64 (len .Episodes)) 3}} more runs</span>{{end}}</td></tr>
{{end}}</table>
{{range .Limits}}{{if .Unheld}}<div class="sub bad"><code>{{.Name}}</code> is keyed by {{range $i, $h := .Unheld}}{{if $i}}, {{end}}<code>{{$h}}</code>{{end}}, which no line of the logs holds: replayed as if no request carried it</div>{{end}}{{end}}

{{if .TopClients}}<h2>Clients refused most</h2>
<table><tr><th>client</th><th class="n">denied</th><th>last limit</th><th>from – to</th></tr>
{{range .TopClients}}<tr><td><code>{{shown .Name}}</code></td><td class="n">{{if .Error}}≤ {{end}}{{commas .Denied}}</td><td>{{.Limit}}</td><td>{{clock .First}} – {{clock .Last}}</td></tr>{{end}}</table>{{end}}
{{if .TopKeys}}<h2>API keys refused most</h2>
<table><tr><th>key</th><th class="n">denied</th><th>last limit</th><th>from – to</th></tr>
{{range .TopKeys}}<tr><td><code>{{shown .Name}}</code></td><td class="n">{{if .Error}}≤ {{end}}{{commas .Denied}}</td><td>{{.Limit}}</td><td>{{clock .First}} – {{clock .Last}}</td></tr>{{end}}</table>{{end}}

{{with .Agreement}}<h2>Against the decisions in the log</h2>
<p>{{commas .Matched}} of {{commas .Compared}} decided the same ({{fine .Matched .Compared}}).
{{if .ReplayDenied}}{{commas .ReplayDenied}} refused here but allowed there. {{end}}{{if .ReplayAllowed}}{{commas .ReplayAllowed}} allowed here but refused there. {{end}}
{{if or .Boundary .Reordered .Unexplained}}Of the differences: {{commas .Boundary}} at a refill or window boundary (within {{dur .Tolerance}}, then charged as logged), {{commas .Reordered}} reordered, <b>{{commas .Unexplained}} unexplained</b>.{{end}}
{{if .Degraded}}{{commas .Degraded}} decided by failure policies were not compared.{{end}}
{{if .Shed}}{{commas .Shed}} shed by overload control in the log (503): reported as logged, not simulated.{{end}}</p>
{{if .Mismatches}}<table><tr><th>time</th><th>client</th><th>request</th><th>log</th><th>replay</th><th>why</th><th>line</th></tr>
{{range .Mismatches}}<tr><td>{{micro .Time}}</td><td><code>{{.ClientIP}}</code></td><td>{{shown .Method}} <code>{{shown .Path}}</code>{{if .Key}} key {{shown .Key}}{{end}}</td>
<td>{{.Logged}} {{shown .LoggedLimit}}</td><td>{{.Replay}} {{.ReplayLimit}}</td><td>{{.Class}}</td><td>{{shown .Log}}:{{.Line}}</td></tr>{{end}}</table>{{end}}{{end}}

{{with .Compare}}<h2>With <code>{{.Policy}}</code> instead</h2>
<p>{{commas .Flips}} requests flip: {{commas .ToDenied}} allowed → denied, {{commas .ToAllowed}} denied → allowed ({{commas .Allowed}} allowed and {{commas .Denied}} denied in all).</p>
{{if .Groups}}<table><tr><th>flip</th><th>limit</th><th>client</th><th class="n">count</th><th>from – to</th><th>examples</th></tr>
{{range .Groups}}<tr><td>{{if eq .Direction "to_denied"}}allowed → denied{{else}}denied → allowed{{end}}</td><td><code>{{.Limit}}</code></td><td><code>{{shown .Client}}</code></td>
<td class="n">{{commas .Count}}</td><td>{{clock .First}} – {{clock .Last}}</td><td>{{range .Examples}}{{shown .Method}} <code>{{shown .Path}}</code> ({{shown .Log}}:{{.Line}})<br>{{end}}</td></tr>{{end}}</table>
{{if .GroupsLeftOut}}<p class="sub">and {{commas .GroupsLeftOut}} more flips in smaller groups</p>{{end}}{{end}}
<h3>Its limits</h3>
<table><tr><th>limit</th><th class="n">seen</th><th class="n">allowed</th><th class="n">denied</th><th class="n">binding</th><th></th></tr>
{{range .Limits}}<tr><td><code>{{.Name}}</code>{{if .Shadow}} <span class="sub">shadow</span>{{end}}</td><td class="n">{{commas .Seen}}</td><td class="n">{{commas .Allowed}}</td><td class="n">{{commas .Denied}}</td><td class="n">{{commas .Binding}}</td><td>{{bar .}}</td></tr>{{end}}</table>{{end}}

<p class="sub">Replayed in {{dur .Resources.Elapsed}}; at most {{commas (i64 .Resources.PeakKeys)}} counters and {{commas (i64 .Resources.PeakHeld)}} records held, {{mb .Resources.PeakHeapBytes}} of heap.
{{if .Late}}{{commas .Late}} records came later than the reorder window (at most {{dur .MaxLate}}).{{end}}</p>
</body></html>
`

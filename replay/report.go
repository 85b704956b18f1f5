package replay

import (
	"fmt"
	"time"

	"github.com/floodgate/floodgate/policy"
)

// Duration is a time.Duration written in JSON as Go writes durations
// ("1.5s").
type Duration time.Duration

// MarshalText writes d as time.Duration's String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads what MarshalText writes.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	*d = Duration(v)
	return nil
}

// Report is what a replay found.
type Report struct {
	// Policy names the policy file the requests were decided by.
	Policy string `json:"policy"`
	// Logs describes the logs read.
	Logs []LogSummary `json:"logs"`
	// From and To are the first and last arrivals replayed.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Requests counts the requests replayed: Allowed by every limit,
	// Denied by one (429, or the 503 of its refusal), Forbidden for their
	// API key (403, once the limits that need no key allowed them),
	// Answered by the gateway before any limit (Outcome.Answered: its own
	// 400s, the deny list's 403, the penalty box's 429), and among the
	// allowed, Unlimited ones no limit applied to.
	Requests  int64 `json:"requests"`
	Allowed   int64 `json:"allowed"`
	Denied    int64 `json:"denied"`
	Forbidden int64 `json:"forbidden"`
	Answered  int64 `json:"answered"`
	Unlimited int64 `json:"unlimited"`
	// Errors counts requests the engine could not decide (a cost above a
	// limit's capacity): refused, and counted in Denied too.
	Errors int64 `json:"errors,omitempty"`
	// Limits has one entry per limit of the policy, in evaluation order.
	Limits []LimitReport `json:"limits"`
	// TopClients and TopKeys are the clients and API keys refused most.
	TopClients []Affected `json:"top_clients"`
	TopKeys    []Affected `json:"top_keys"`
	// Timeline counts requests and refusals per minute (or coarser).
	Timeline *Timeline `json:"timeline"`
	// Agreement compares the replay with the decisions the log records;
	// nil when the log records none.
	Agreement *Agreement `json:"agreement,omitempty"`
	// Compare lists the requests another policy decides differently.
	Compare *Comparison `json:"compare,omitempty"`
	// Unheld names what the policy matches requests by that no line of
	// the logs held ("host": Floodgate's and NGINX's combined formats hold
	// none), replayed as if no request carried it; LimitReport.Unheld
	// names the fields a limit is keyed by.
	Unheld []string `json:"unheld,omitempty"`
	// Late counts records that arrived later than the reorder window
	// allowed (replayed at the time the replay had reached), MaxLate by
	// how much at most.
	Late    int64    `json:"late,omitempty"`
	MaxLate Duration `json:"max_late,omitempty"`
	// Resources says what the replay took.
	Resources Resources `json:"resources"`
}

// LogSummary describes one log read.
type LogSummary struct {
	Name   string `json:"name"`
	Format string `json:"format"`
	Lines  int64  `json:"lines"`
	// Skipped counts the lines that could not be read; Samples shows a
	// few, with their line numbers.
	Skipped int64    `json:"skipped"`
	Samples []string `json:"samples,omitempty"`
	// Resolution is the precision of the log's times.
	Resolution Duration `json:"resolution"`
}

// LimitReport is what one limit did during the replay.
type LimitReport struct {
	Name      string `json:"name"`
	Scope     string `json:"scope"`
	Algorithm string `json:"algorithm"`
	Shadow    bool   `json:"shadow,omitempty"`
	// Seen counts the requests the limit applied to; Allowed and Denied
	// its own decisions on them (a shadow limit's denials are the ones it
	// would make if enforced); Binding the refusals it is reported for.
	Seen    int64 `json:"seen"`
	Allowed int64 `json:"allowed"`
	Denied  int64 `json:"denied"`
	Binding int64 `json:"binding"`
	// Episodes are the runs of denials, a minute or less apart: when
	// denials start and stop. EpisodesLeftOut counts those past the first
	// maxEpisodes.
	Episodes        []Episode `json:"episodes,omitempty"`
	EpisodesLeftOut int       `json:"episodes_left_out,omitempty"`
	// Unheld names the header fields the limit is keyed by that no line
	// of the logs held (header:X-Tenant): Floodgate's access log holds
	// only the User-Agent and the Referer, so the limit was replayed as
	// if no request carried them.
	Unheld []string `json:"unheld,omitempty"`
}

// Episode is a run of one limit's denials.
type Episode struct {
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Denied int64     `json:"denied"`
}

// Resources says what a replay took.
type Resources struct {
	// Elapsed is the wall time of the replay.
	Elapsed Duration `json:"elapsed"`
	// PeakKeys is the most counters the store held at once (idle ones
	// are swept every minute of the log's time).
	PeakKeys int `json:"peak_keys"`
	// PeakHeld is the most records held at once to put them in order.
	PeakHeld int `json:"peak_held"`
	// PeakHeapBytes is the largest Go heap seen during the replay.
	PeakHeapBytes uint64 `json:"peak_heap_bytes"`
}

const (
	maxEpisodes = 50
	episodeGap  = int64(time.Minute)
)

// tally accumulates a Report from outcomes.
type tally struct {
	r       *Report
	limits  map[*policy.Limit]int
	clients *topK
	keys    *topK
	tl      *Timeline
	episode []struct{ start, end, n int64 }
	first   bool
	// keyed holds, per limit, the header fields it is keyed by; held
	// whether a record held each such field.
	keyed [][]string
	held  map[string]bool
	// byHost reports that a route or a limit of the policy matches by
	// host, hostHeld that a record held a host.
	byHost, hostHeld bool
}

func newTally(p *policy.Policy, name string) *tally {
	t := &tally{r: &Report{Policy: name}, limits: map[*policy.Limit]int{}, clients: newTopK(512), keys: newTopK(512), first: true}
	if f := p.File(); f != nil {
		for _, rt := range f.Routes {
			t.byHost = t.byHost || len(rt.Match.Hosts) > 0
		}
		for _, l := range f.Limits {
			t.byHost = t.byHost || len(l.Match.Hosts) > 0
		}
	}
	t.keyed = make([][]string, len(p.Limits()))
	for i, l := range p.Limits() {
		t.limits[l] = i
		t.r.Limits = append(t.r.Limits, LimitReport{Name: l.Name, Scope: l.Scope, Algorithm: l.Rule.Algorithm().String(), Shadow: l.Shadow})
		for _, part := range l.Key {
			if part.Kind == policy.KeyHeader {
				if t.held == nil {
					t.held = map[string]bool{}
				}
				t.held[part.Header] = false
				t.keyed[i] = append(t.keyed[i], part.Header)
			}
		}
	}
	t.episode = make([]struct{ start, end, n int64 }, len(t.r.Limits))
	t.tl = newTimeline(len(t.r.Limits))
	return t
}

// add counts one decided request.
func (t *tally) add(rec *Record, o *Outcome) {
	r := t.r
	if t.first {
		r.From, t.first = time.Unix(0, rec.Time).UTC(), false
	}
	r.To = time.Unix(0, rec.Time).UTC()
	r.Requests++
	if rec.Host != "" {
		t.hostHeld = true
	}
	if t.held != nil {
		for _, h := range rec.Headers {
			if held, ok := t.held[h.Name]; ok && !held && h.Value != "" {
				t.held[h.Name] = true
			}
		}
	}
	b := t.tl.bucket(rec.Time)
	t.tl.Requests[b]++
	switch {
	case o.Denied:
		r.Denied++
		t.tl.Denied[b]++
		if o.Err != nil {
			r.Errors++
		}
	case o.Forbidden:
		r.Forbidden++
	case o.Answered != 0:
		r.Answered++
	default:
		r.Allowed++
		if len(o.Match.Hits) == 0 {
			r.Unlimited++
		}
	}
	res := o.Result
	for i, l := range o.Match.Limits {
		if i >= len(res.Decisions) {
			break
		}
		li, ok := t.limits[l]
		if !ok {
			continue
		}
		lr := &r.Limits[li]
		lr.Seen++
		if res.Decisions[i].Allowed {
			lr.Allowed++
			continue
		}
		lr.Denied++
		t.tl.Limits[li][b]++
		t.deny(li, rec.Time)
	}
	if o.Denied {
		name := ""
		if l := o.Binding(); l != nil {
			name = l.Name
			if li, ok := t.limits[l]; ok {
				r.Limits[li].Binding++
			}
		}
		t.clients.add(o.Match.ClientKey, name, rec.Time)
		t.keys.add(o.Match.KeyID, name, rec.Time)
	}
}

// deny extends limit li's current episode of denials, or starts one.
func (t *tally) deny(li int, at int64) {
	e := &t.episode[li]
	if e.n > 0 && at-e.end <= episodeGap {
		e.end = at
		e.n++
		return
	}
	t.closeEpisode(li)
	*e = struct{ start, end, n int64 }{at, at, 1}
}

func (t *tally) closeEpisode(li int) {
	e := &t.episode[li]
	if e.n == 0 {
		return
	}
	lr := &t.r.Limits[li]
	if len(lr.Episodes) < maxEpisodes {
		lr.Episodes = append(lr.Episodes, Episode{Start: time.Unix(0, e.start).UTC(), End: time.Unix(0, e.end).UTC(), Denied: e.n})
	} else {
		lr.EpisodesLeftOut++
	}
	e.n = 0
}

// finish completes the report.
func (t *tally) finish(top int) *Report {
	for li := range t.episode {
		t.closeEpisode(li)
		for _, h := range t.keyed[li] {
			if !t.held[h] && t.r.Requests > 0 {
				t.r.Limits[li].Unheld = append(t.r.Limits[li].Unheld, policy.KeyPart{Kind: policy.KeyHeader, Header: h}.String())
			}
		}
	}
	if t.byHost && !t.hostHeld && t.r.Requests > 0 {
		t.r.Unheld = append(t.r.Unheld, "host")
	}
	t.tl.finish()
	t.r.Timeline = t.tl
	t.r.TopClients = t.clients.top(top)
	t.r.TopKeys = t.keys.top(top)
	return t.r
}

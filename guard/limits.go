package guard

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/policy"
)

// Limit is one limit written in code: the fields of a policy file's
// limits (package config), in Go types. A field left zero takes the
// file's default, and the file's rules apply: a parameter the algorithm
// does not read is an error, and so is a missing one.
//
// Plans, API keys, stages, routes, tokens and trusted proxies need a
// policy file (File).
type Limit struct {
	// Name identifies the limit in the RateLimit fields, logs and metrics.
	Name string
	// Algorithm is the algorithm; zero means the token bucket when Rate
	// is set, the quota when Period is, and the sliding window otherwise.
	Algorithm floodgate.Algorithm

	// Rate units are admitted every Per (default one second), with Burst
	// units of capacity (default Rate): the token bucket, GCRA and the
	// leaky bucket.
	Rate  int64
	Per   time.Duration
	Burst int64
	// Max is the count: per Window for the window algorithms (fixed
	// window, sliding log, sliding window), in flight for concurrency,
	// per Period for a quota.
	Max    int64
	Window time.Duration
	// LeaseTTL frees the slot of a concurrency limit whose request never
	// ended (default one minute).
	LeaseTTL time.Duration
	// Period is a quota's calendar period, in TimeZone (an IANA name,
	// default UTC); a monthly one starts on AnchorDay.
	Period    floodgate.Period
	TimeZone  string
	AnchorDay int

	// Key is what the limit counts per: client_ip (the default), user,
	// api_key, route, global or header:NAME; several parts separated by
	// commas make a composite key ("user,header:X-Tenant"). A request
	// that lacks a part is not counted by the limit.
	Key string
	// Methods and Paths select the requests the limit applies to (empty:
	// every request). Paths are patterns: literal segments, {name} or *
	// for one segment, and a final /** for any rest.
	Methods []string
	Paths   []string
	// Cost is the units one request takes (default 1).
	Cost int64
	// CountOn, when set, charges only answers with these statuses (a
	// login limit counts 401 and 403): the cost is reserved while the
	// request is served and kept only for them.
	CountOn []int
	// OnFailure is what the limit does when its store cannot answer in
	// time (the zero value is floodgate.FailLocal, the file's default).
	OnFailure floodgate.FailurePolicy
	// Shadow limits are evaluated and counted but never refuse.
	Shadow bool
}

// limitsName names the policy Limits makes, in its problems.
const limitsName = "guard.Limits"

// fileLimit is a Limit as the policy file writes it.
type fileLimit struct {
	Name      string     `yaml:"name"`
	Algorithm string     `yaml:"algorithm,omitempty"`
	Rate      int64      `yaml:"rate,omitempty"`
	Per       string     `yaml:"per,omitempty"`
	Burst     int64      `yaml:"burst,omitempty"`
	Max       int64      `yaml:"limit,omitempty"`
	Window    string     `yaml:"window,omitempty"`
	LeaseTTL  string     `yaml:"lease_ttl,omitempty"`
	Period    string     `yaml:"period,omitempty"`
	TimeZone  string     `yaml:"time_zone,omitempty"`
	AnchorDay int        `yaml:"anchor_day,omitempty"`
	Key       []string   `yaml:"key,omitempty"`
	Match     *fileMatch `yaml:"match,omitempty"`
	Cost      int64      `yaml:"cost,omitempty"`
	CountOn   []int      `yaml:"count_on,omitempty"`
	OnFailure string     `yaml:"on_failure,omitempty"`
	Shadow    bool       `yaml:"shadow,omitempty"`
}

type fileMatch struct {
	Methods []string `yaml:"methods,omitempty"`
	Paths   []string `yaml:"paths,omitempty"`
}

// duration writes a duration as the file does; zero is left out.
func duration(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// compileLimits compiles limits written in code by the rules of the
// policy file: they are written as a file's limits and read back.
func compileLimits(limits []Limit) (*policy.Policy, error) {
	if len(limits) == 0 {
		return nil, errors.New("guard: Limits needs at least one limit")
	}
	doc := struct {
		Version int         `yaml:"version"`
		Limits  []fileLimit `yaml:"limits"`
	}{Version: 1}
	for i := range limits {
		l := &limits[i]
		fl := fileLimit{Name: l.Name, Rate: l.Rate, Per: duration(l.Per), Burst: l.Burst, Max: l.Max,
			Window: duration(l.Window), LeaseTTL: duration(l.LeaseTTL), TimeZone: l.TimeZone, AnchorDay: l.AnchorDay,
			Cost: l.Cost, CountOn: l.CountOn, Shadow: l.Shadow}
		if l.Algorithm != 0 {
			if l.Algorithm.Traits().Name == "" {
				return nil, fmt.Errorf("guard: limit %q: %v is not an algorithm", l.Name, l.Algorithm)
			}
			fl.Algorithm = l.Algorithm.String()
		}
		if l.Period != 0 {
			fl.Period = l.Period.String()
		}
		if l.OnFailure != floodgate.FailLocal {
			fl.OnFailure = l.OnFailure.String()
		}
		if l.Key != "" {
			for part := range strings.SplitSeq(l.Key, ",") {
				fl.Key = append(fl.Key, strings.TrimSpace(part))
			}
		}
		if len(l.Methods) > 0 || len(l.Paths) > 0 {
			fl.Match = &fileMatch{Methods: l.Methods, Paths: l.Paths}
		}
		doc.Limits = append(doc.Limits, fl)
	}
	data, err := yaml.Marshal(&doc)
	if err != nil {
		return nil, fmt.Errorf("guard: limits: %w", err)
	}
	f, err := config.Parse(limitsName, data)
	if err != nil {
		var es config.Errors
		if errors.As(err, &es) {
			// The positions are those of a file no one wrote: the field
			// paths (limits[1].burst) say where the problem is.
			for _, e := range es {
				e.Line, e.Column = 0, 0
			}
			return nil, es
		}
		return nil, fmt.Errorf("guard: %w", err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		return nil, fmt.Errorf("guard: %w", err)
	}
	return p, nil
}

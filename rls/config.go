package rls

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/limiter"
	"go.yaml.in/yaml/v3"
)

// ErrConfig marks every configuration error; the message names the file,
// the line and column, and the field.
var ErrConfig = errors.New("rls: invalid configuration")

// Unit is a time unit of an envoyproxy/ratelimit rate limit.
type Unit uint8

// Units, numbered as in the RLS v3 protocol's RateLimit.Unit enum.
const (
	Second Unit = 1
	Minute Unit = 2
	Hour   Unit = 3
	Day    Unit = 4
	Month  Unit = 5
	Year   Unit = 6
	Week   Unit = 7
)

// String returns the unit as written in configuration files.
func (u Unit) String() string {
	switch u {
	case Second:
		return "second"
	case Minute:
		return "minute"
	case Hour:
		return "hour"
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	case Year:
		return "year"
	}
	return "unit(" + strconv.Itoa(int(u)) + ")"
}

// ParseUnit accepts second, minute, hour, day, week, month or year in any
// case.
func ParseUnit(s string) (Unit, error) {
	for u := Second; u <= Week; u++ {
		if strings.EqualFold(s, u.String()) {
			return u, nil
		}
	}
	return 0, fmt.Errorf("unknown unit %q (want second, minute, hour, day, week, month or year)", s)
}

// seconds is the nominal length of the unit, used for fixed windows and
// for the w parameter of RateLimit-Policy (month: 30 days, year: 365).
func (u Unit) seconds() int64 {
	switch u {
	case Second:
		return 1
	case Minute:
		return 60
	case Hour:
		return 3600
	case Day:
		return 86400
	case Week:
		return 7 * 86400
	case Month:
		return 30 * 86400
	case Year:
		return 365 * 86400
	}
	return 0
}

// Config is a set of domains loaded from files in the envoyproxy/ratelimit
// format. It is immutable once loaded and safe for concurrent use.
type Config struct {
	domains map[string]*domain
	// fp fingerprints the files Load read (names, sizes, times), so that
	// Watch can tell whether they changed since.
	fp string
}

// Domains lists the configured domains in order.
func (c *Config) Domains() []string {
	out := make([]string, 0, len(c.domains))
	for d := range c.domains {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

type domain struct {
	name string
	file string
	root level
}

// level is one list of descriptors: the top-level list of a domain or the
// nested list of one descriptor.
type level struct {
	exact    map[entryKey]*node // key and value given
	wildcard map[string][]*node // key → values ending in '*', longest prefix first
	anyValue map[string]*node   // key only: any value, one counter per value
}

type entryKey struct{ key, value string }

// node is one configured descriptor.
type node struct {
	key, value string // value "" matches any value; "p*" any value starting with p
	limit      *rateLimit
	shadow     bool
	detailed   bool
	children   level
	path       string // domain.key_value.key ..., the default limit name
}

// rateLimit is the rate_limit block of a descriptor, compiled.
type rateLimit struct {
	name      string
	unit      Unit
	perUnit   uint32
	unlimited bool
	replaces  []string
	shadow    bool
	// rule is nil when unlimited or when requests_per_unit is 0 (every
	// request is over the limit, envoyproxy/ratelimit's way to block).
	rule *limiter.Rule
	// tmpl rebuilds the limit for a per-request override.
	tmpl limitTemplate
	// fields is the limit's part of the response fields.
	fields *fields.Limit
}

// limitTemplate is what an override keeps from the configured limit.
type limitTemplate struct {
	algorithm floodgate.Algorithm
	burst     int64 // 0: the same as the requests per unit
	onFailure floodgate.FailurePolicy
	location  *time.Location
	anchorDay int
}

// LoadOptions tune loading. The zero value is usable.
type LoadOptions struct {
	// Extensions lists the file-name extensions read from a directory;
	// nil means .yaml and .yml.
	Extensions []string
}

// Load reads every path, a file or a directory (whose regular files with
// a YAML extension are read in name order, not recursively), and returns
// the configuration of all the domains they define. A domain defined twice
// is an error.
func Load(paths []string, opts LoadOptions) (*Config, error) {
	files, err := configFiles(paths, opts)
	if err != nil {
		return nil, err
	}
	fp, err := fingerprintFiles(files)
	if err != nil {
		return nil, err
	}
	srcs := make(map[string][]byte, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		srcs[f] = b
	}
	c, err := parseFiles(files, srcs)
	if err != nil {
		return nil, err
	}
	c.fp = fp
	return c, nil
}

// configFiles lists the files Load reads for paths.
func configFiles(paths []string, opts LoadOptions) ([]string, error) {
	exts := opts.Extensions
	if exts == nil {
		exts = []string{".yaml", ".yml"}
	}
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		for _, e := range ents {
			if e.Type()&fs.ModeType != 0 && e.Type()&fs.ModeSymlink == 0 {
				continue
			}
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			for _, x := range exts {
				if strings.EqualFold(filepath.Ext(e.Name()), x) {
					files = append(files, filepath.Join(p, e.Name()))
					break
				}
			}
		}
	}
	return files, nil
}

// Parse reads one file's contents; name is used in error messages.
func Parse(name string, src []byte) (*Config, error) {
	return parseFiles([]string{name}, map[string][]byte{name: src})
}

func parseFiles(order []string, srcs map[string][]byte) (*Config, error) {
	c := &Config{domains: map[string]*domain{}}
	for _, name := range order {
		p := &parser{file: name}
		d, err := p.file1(srcs[name])
		if err != nil {
			return nil, err
		}
		if old, ok := c.domains[d.name]; ok {
			return nil, fmt.Errorf("%w: %s: domain %q is already defined in %s", ErrConfig, name, d.name, old.file)
		}
		c.domains[d.name] = d
	}
	return c, nil
}

// parser reads one file.
type parser struct {
	file string
}

func (p *parser) errf(n *yaml.Node, field, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	if n == nil {
		return fmt.Errorf("%w: %s: %s", ErrConfig, p.file, msg)
	}
	return fmt.Errorf("%w: %s:%d:%d: %s", ErrConfig, p.file, n.Line, n.Column, msg)
}

// fields walks a mapping node, calling f for each key in order; a key f
// does not know is an error.
func (p *parser) fields(n *yaml.Node, where string, f func(key string, k, v *yaml.Node) (bool, error)) error {
	if n.Kind != yaml.MappingNode {
		return p.errf(n, where, "want a mapping")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return p.errf(k, where, "keys must be strings")
		}
		if seen[k.Value] {
			return p.errf(k, where+k.Value, "given twice")
		}
		seen[k.Value] = true
		known, err := f(k.Value, k, v)
		if err != nil {
			return err
		}
		if !known {
			return p.errf(k, where+k.Value, "unknown field")
		}
	}
	return nil
}

func (p *parser) str(v *yaml.Node, field string) (string, error) {
	if v.Kind != yaml.ScalarNode || (v.Tag != "!!str" && v.Tag != "!!int" && v.Tag != "!!float" && v.Tag != "!!bool") {
		return "", p.errf(v, field, "want a string")
	}
	return v.Value, nil
}

func (p *parser) boolean(v *yaml.Node, field string) (bool, error) {
	var b bool
	if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" || v.Decode(&b) != nil {
		return false, p.errf(v, field, "want true or false")
	}
	return b, nil
}

func (p *parser) integer(v *yaml.Node, field string, min, max int64) (int64, error) {
	var n int64
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || v.Decode(&n) != nil {
		return 0, p.errf(v, field, "want a whole number")
	}
	if n < min || n > max {
		return 0, p.errf(v, field, "%d is out of range [%d, %d]", n, min, max)
	}
	return n, nil
}

func (p *parser) file1(src []byte) (*domain, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrConfig, p.file, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, p.errf(nil, "", "empty file (want domain and descriptors)")
	}
	root := doc.Content[0]
	d := &domain{file: p.file}
	var descs *yaml.Node
	err := p.fields(root, "", func(key string, k, v *yaml.Node) (bool, error) {
		switch key {
		case "domain":
			s, err := p.str(v, "domain")
			if err != nil {
				return true, err
			}
			if s == "" {
				return true, p.errf(v, "domain", "must not be empty")
			}
			d.name = s
		case "descriptors":
			descs = v
		default:
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if d.name == "" {
		return nil, p.errf(root, "domain", "missing")
	}
	d.root, err = p.level(descs, d.name, "descriptors")
	if err != nil {
		return nil, err
	}
	return d, nil
}

func (p *parser) level(n *yaml.Node, parent, field string) (level, error) {
	lv := level{exact: map[entryKey]*node{}, wildcard: map[string][]*node{}, anyValue: map[string]*node{}}
	if n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		return lv, nil
	}
	if n.Kind != yaml.SequenceNode {
		return lv, p.errf(n, field, "want a list of descriptors")
	}
	for i, item := range n.Content {
		where := fmt.Sprintf("%s[%d].", field, i)
		nd, err := p.node(item, parent, where)
		if err != nil {
			return lv, err
		}
		switch {
		case nd.value == "":
			if _, dup := lv.anyValue[nd.key]; dup {
				return lv, p.errf(item, where+"key", "descriptor %q without a value is defined twice at this level", nd.key)
			}
			lv.anyValue[nd.key] = nd
		case strings.HasSuffix(nd.value, "*"):
			for _, o := range lv.wildcard[nd.key] {
				if o.value == nd.value {
					return lv, p.errf(item, where+"value", "descriptor %s=%s is defined twice at this level", nd.key, nd.value)
				}
			}
			lv.wildcard[nd.key] = append(lv.wildcard[nd.key], nd)
		default:
			ek := entryKey{nd.key, nd.value}
			if _, dup := lv.exact[ek]; dup {
				return lv, p.errf(item, where+"value", "descriptor %s=%s is defined twice at this level", nd.key, nd.value)
			}
			lv.exact[ek] = nd
		}
	}
	for _, ws := range lv.wildcard {
		sort.SliceStable(ws, func(i, j int) bool { return len(ws[i].value) > len(ws[j].value) })
	}
	return lv, nil
}

func (p *parser) node(n *yaml.Node, parent, where string) (*node, error) {
	nd := &node{}
	var rl, children *yaml.Node
	err := p.fields(n, where, func(key string, k, v *yaml.Node) (bool, error) {
		var err error
		switch key {
		case "key":
			nd.key, err = p.str(v, where+"key")
			if err == nil && nd.key == "" {
				err = p.errf(v, where+"key", "must not be empty")
			}
		case "value":
			nd.value, err = p.str(v, where+"value")
		case "rate_limit":
			rl = v
		case "descriptors":
			children = v
		case "shadow_mode":
			nd.shadow, err = p.boolean(v, where+"shadow_mode")
		case "detailed_metric":
			nd.detailed, err = p.boolean(v, where+"detailed_metric")
		default:
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return nil, err
	}
	if nd.key == "" {
		return nil, p.errf(n, where+"key", "missing")
	}
	nd.path = parent + "." + nd.key
	if nd.value != "" {
		nd.path += "_" + nd.value
	}
	if rl != nil {
		nd.limit, err = p.rateLimit(rl, nd, where+"rate_limit.")
		if err != nil {
			return nil, err
		}
	}
	nd.children, err = p.level(children, nd.path, where+"descriptors")
	if err != nil {
		return nil, err
	}
	return nd, nil
}

func (p *parser) rateLimit(n *yaml.Node, nd *node, where string) (*rateLimit, error) {
	r := &rateLimit{name: nd.path, shadow: nd.shadow}
	var unitNode, rpuNode, algNode, burstNode, quotaNode *yaml.Node
	haveRPU := false
	var perUnit int64
	err := p.fields(n, where, func(key string, k, v *yaml.Node) (bool, error) {
		var err error
		switch key {
		case "unit":
			unitNode = v
			var s string
			if s, err = p.str(v, where+"unit"); err == nil {
				if r.unit, err = ParseUnit(s); err != nil {
					err = p.errf(v, where+"unit", "%v", err)
				}
			}
		case "requests_per_unit":
			rpuNode = v
			haveRPU = true
			perUnit, err = p.integer(v, where+"requests_per_unit", 0, math.MaxUint32)
		case "unlimited":
			r.unlimited, err = p.boolean(v, where+"unlimited")
		case "name":
			var s string
			if s, err = p.str(v, where+"name"); err == nil {
				if s == "" {
					err = p.errf(v, where+"name", "must not be empty")
				}
				r.name = s
			}
		case "replaces":
			err = p.replaces(v, r, where+"replaces")
		case "algorithm":
			algNode = v
			var s string
			if s, err = p.str(v, where+"algorithm"); err == nil {
				r.tmpl.algorithm, err = floodgate.ParseAlgorithm(s)
				if k := r.tmpl.algorithm.Kind(); err == nil && k != floodgate.KindRate && k != floodgate.KindQuota {
					err = fmt.Errorf("%s is not available over RLS (no delays, no leases)", s)
				}
				if err != nil {
					err = p.errf(v, where+"algorithm", "%v", err)
				}
			}
		case "burst":
			burstNode = v
			r.tmpl.burst, err = p.integer(v, where+"burst", 1, math.MaxInt32)
		case "quota":
			quotaNode = v
			err = p.quota(v, r, where+"quota.")
		case "on_failure":
			var s string
			if s, err = p.str(v, where+"on_failure"); err == nil {
				if r.tmpl.onFailure, err = floodgate.ParseFailurePolicy(s); err != nil {
					err = p.errf(v, where+"on_failure", "want allow, deny or local, got %q", s)
				}
			}
		default:
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return nil, err
	}
	if r.unlimited {
		if haveRPU || unitNode != nil {
			// envoyproxy/ratelimit rejects unit and requests_per_unit
			// together with unlimited; so do we.
			at := rpuNode
			if at == nil {
				at = unitNode
			}
			return nil, p.errf(at, where+"unlimited", "an unlimited rate limit takes no unit or requests_per_unit")
		}
		return r, nil
	}
	if unitNode == nil {
		return nil, p.errf(n, where+"unit", "missing")
	}
	if !haveRPU {
		return nil, p.errf(n, where+"requests_per_unit", "missing")
	}
	r.perUnit = uint32(perUnit)
	if r.tmpl.algorithm == 0 {
		// Weeks and months are calendar periods (in UTC unless the quota
		// block names a zone); every other unit is a fixed window.
		r.tmpl.algorithm = floodgate.FixedWindow
		if quotaNode != nil || r.unit == Week || r.unit == Month {
			r.tmpl.algorithm = floodgate.Quota
		}
	}
	if burstNode != nil {
		if !r.tmpl.algorithm.Traits().Params.Has(floodgate.ParamBurst) {
			return nil, p.errf(burstNode, where+"burst", "only token_bucket, gcra and leaky_bucket take a burst")
		}
	}
	if quotaNode != nil && r.tmpl.algorithm.Family() != floodgate.FamilyQuota {
		return nil, p.errf(quotaNode, where+"quota", "only the quota algorithm takes a quota block")
	}
	if r.tmpl.algorithm.Family() == floodgate.FamilyQuota && r.unit != Day && r.unit != Week && r.unit != Month {
		at := algNode
		if at == nil {
			at = unitNode
		}
		return nil, p.errf(at, where+"unit", "a calendar quota needs unit day, week or month, got %s", r.unit)
	}
	if r.perUnit == 0 {
		// Blocked: every request is over the limit; no counter needed.
		r.fields = fields.NewLimit(&floodgate.Limit{Name: r.name, Algorithm: floodgate.FixedWindow,
			Max: 0, Window: time.Duration(r.unit.seconds()) * time.Second})
		return r, nil
	}
	l, err := r.tmpl.limit(r.name, r.unit, 1, int64(r.perUnit))
	if err != nil {
		return nil, p.errf(n, strings.TrimSuffix(where, "."), "%v", err)
	}
	r.rule, err = limiter.NewRule(l, r.tmpl.onFailure, r.shadow)
	if err != nil {
		return nil, p.errf(n, strings.TrimSuffix(where, "."), "%v", err)
	}
	r.fields = fields.ForRule(r.rule)
	return r, nil
}

func (p *parser) replaces(v *yaml.Node, r *rateLimit, field string) error {
	if v.Kind != yaml.SequenceNode {
		return p.errf(v, field, "want a list of {name: ...}")
	}
	for i, item := range v.Content {
		where := fmt.Sprintf("%s[%d].", field, i)
		var name string
		err := p.fields(item, where, func(key string, k, v *yaml.Node) (bool, error) {
			if key != "name" {
				return false, nil
			}
			var err error
			name, err = p.str(v, where+"name")
			return true, err
		})
		if err != nil {
			return err
		}
		if name == "" {
			return p.errf(item, where+"name", "missing")
		}
		r.replaces = append(r.replaces, name)
	}
	return nil
}

func (p *parser) quota(v *yaml.Node, r *rateLimit, where string) error {
	return p.fields(v, where, func(key string, k, v *yaml.Node) (bool, error) {
		var err error
		switch key {
		case "time_zone":
			var s string
			if s, err = p.str(v, where+"time_zone"); err == nil {
				if r.tmpl.location, err = time.LoadLocation(s); err != nil {
					err = p.errf(v, where+"time_zone", "unknown time zone %q", s)
				}
			}
		case "anchor_day":
			var n int64
			n, err = p.integer(v, where+"anchor_day", 1, 31)
			r.tmpl.anchorDay = int(n)
		default:
			return false, nil
		}
		return true, err
	})
}

// limit builds the Floodgate limit for perUnit requests every mult units.
func (t *limitTemplate) limit(name string, unit Unit, mult uint32, perUnit int64) (floodgate.Limit, error) {
	if mult == 0 {
		mult = 1
	}
	l := floodgate.Limit{Name: name, Algorithm: t.algorithm}
	if l.Algorithm == 0 {
		l.Algorithm = floodgate.FixedWindow
	}
	span := time.Duration(unit.seconds()) * time.Second * time.Duration(mult)
	switch l.Algorithm.Family() {
	case floodgate.FamilyRate:
		l.Rate, l.Per, l.Burst = perUnit, span, t.burst
		if l.Burst == 0 {
			l.Burst = perUnit
		}
	case floodgate.FamilyQuota:
		l.Max, l.Location, l.AnchorDay = perUnit, t.location, t.anchorDay
		if mult != 1 {
			return l, fmt.Errorf("a calendar quota cannot span %d units", mult)
		}
		switch unit {
		case Day:
			l.Period = floodgate.Day
		case Week:
			l.Period = floodgate.Week
		case Month:
			l.Period = floodgate.Month
		default:
			return l, fmt.Errorf("a calendar quota needs unit day, week or month, got %s", unit)
		}
	default:
		l.Max, l.Window = perUnit, span
	}
	return l, l.Validate()
}

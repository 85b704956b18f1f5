package rls

import (
	"crypto/sha256"
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
	"github.com/floodgate/floodgate/internal/watch"
	"github.com/floodgate/floodgate/internal/yamlfile"
	"github.com/floodgate/floodgate/limiter"
)

// ErrConfig marks every configuration error of Load and Parse: errors.Is
// reports it for their errors, whose message holds every problem, one per
// line, as "file:line:col: field: message" (the same format, and type, as
// config.Errors).
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
	// version hashes the files the configuration was read from (see
	// watch.Hash), so that Watch can tell whether they changed since.
	version [sha256.Size]byte
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

// configError is what Load and Parse return: every problem of the files,
// marked ErrConfig.
type configError struct{ errs yamlfile.Errors }

func (e *configError) Error() string        { return e.errs.Error() }
func (e *configError) Is(target error) bool { return target == ErrConfig }
func (e *configError) Unwrap() error        { return e.errs }

func invalid(errs yamlfile.Errors) error { return &configError{errs.Sorted()} }

// unreadable is a file that cannot be read, as a problem of that file.
func unreadable(path string, err error) *yamlfile.Error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &yamlfile.Error{File: path, Msg: fmt.Sprintf("cannot read: %v", err)}
}

// Load reads every path, a file or a directory (whose regular files with
// a YAML extension are read in name order, not recursively), and returns
// the configuration of all the domains they define. A domain defined twice
// is an error. The error reports every problem of every file (see
// package doc).
func Load(paths []string, opts LoadOptions) (*Config, error) {
	files, errs := configFiles(paths, opts)
	if len(errs) > 0 {
		return nil, invalid(errs)
	}
	v := &watch.Version{Files: make([]watch.File, 0, len(files))}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, unreadable(f, err))
			continue
		}
		v.Files = append(v.Files, watch.File{Path: f, Data: b})
	}
	if len(errs) > 0 {
		return nil, invalid(errs)
	}
	v.Hash = watch.Hash(v.Files)
	return build(v)
}

// configFiles lists the files Load reads for paths.
func configFiles(paths []string, opts LoadOptions) ([]string, yamlfile.Errors) {
	exts := opts.Extensions
	if exts == nil {
		exts = []string{".yaml", ".yml"}
	}
	var files []string
	var errs yamlfile.Errors
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			errs = append(errs, unreadable(p, err))
			continue
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			errs = append(errs, unreadable(p, err))
			continue
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
	return files, errs
}

// Parse reads one file's contents; name is used in error messages.
func Parse(name string, src []byte) (*Config, error) {
	files := []watch.File{{Path: name, Data: src}}
	return build(&watch.Version{Files: files, Hash: watch.Hash(files)})
}

// build decodes and compiles the files of v, each one domain.
func build(v *watch.Version) (*Config, error) {
	c := &Config{domains: map[string]*domain{}, version: v.Hash}
	var errs yamlfile.Errors
	for _, f := range v.Files {
		spec, d, problems := parseFile(f.Path, f.Data)
		if problems != nil {
			errs = append(errs, problems...)
			continue
		}
		dom := (&compiler{d: d}).file(spec)
		if dom != nil {
			if old, ok := c.domains[dom.name]; ok {
				d.Errorf("domain", "domain %q is already defined in %s", dom.name, old.file)
			} else {
				c.domains[dom.name] = dom
			}
		}
		errs = append(errs, d.Problems()...)
	}
	if len(errs) > 0 {
		return nil, invalid(errs)
	}
	return c, nil
}

// compiler turns the descriptors of one decoded file into the domain's
// matching tree and limits, reporting problems at the fields' positions.
type compiler struct {
	d *yamlfile.Decoder
}

// file compiles a file; nil when it has no usable domain name.
func (c *compiler) file(spec *fileSpec) *domain {
	switch {
	case c.d.Bad("domain"):
		return nil
	case !c.d.Written("domain"):
		c.d.Errorf("domain", "missing")
		return nil
	case spec.Domain == "":
		c.d.Errorf("domain", "must not be empty")
		return nil
	}
	d := &domain{name: spec.Domain, file: c.d.File()}
	d.root = c.level(spec.Descriptors, d.name, "descriptors")
	return d
}

func (c *compiler) level(specs []descriptorSpec, parent, field string) level {
	lv := level{exact: map[entryKey]*node{}, wildcard: map[string][]*node{}, anyValue: map[string]*node{}}
	for i := range specs {
		where := fmt.Sprintf("%s[%d]", field, i)
		nd := c.node(&specs[i], parent, where)
		if nd == nil {
			continue
		}
		switch {
		case nd.value == "":
			if _, dup := lv.anyValue[nd.key]; dup {
				c.d.ErrorOf(where, where+".key", "descriptor %q without a value is defined twice at this level", nd.key)
				continue
			}
			lv.anyValue[nd.key] = nd
		case strings.HasSuffix(nd.value, "*"):
			dup := false
			for _, o := range lv.wildcard[nd.key] {
				dup = dup || o.value == nd.value
			}
			if dup {
				c.d.ErrorOf(where, where+".value", "descriptor %s=%s is defined twice at this level", nd.key, nd.value)
				continue
			}
			lv.wildcard[nd.key] = append(lv.wildcard[nd.key], nd)
		default:
			ek := entryKey{nd.key, nd.value}
			if _, dup := lv.exact[ek]; dup {
				c.d.ErrorOf(where, where+".value", "descriptor %s=%s is defined twice at this level", nd.key, nd.value)
				continue
			}
			lv.exact[ek] = nd
		}
	}
	for _, ws := range lv.wildcard {
		sort.SliceStable(ws, func(i, j int) bool { return len(ws[i].value) > len(ws[j].value) })
	}
	return lv
}

// node compiles one descriptor; nil when it has no usable key.
func (c *compiler) node(s *descriptorSpec, parent, where string) *node {
	keyField := where + ".key"
	switch {
	case c.d.Bad(keyField) || c.d.Bad(where+".value"):
		return nil
	case !c.d.Written(keyField):
		c.d.Errorf(keyField, "missing")
		return nil
	case s.Key == "":
		c.d.Errorf(keyField, "must not be empty")
		return nil
	}
	nd := &node{key: s.Key, value: s.Value, shadow: s.ShadowMode, detailed: s.DetailedMetric}
	nd.path = parent + "." + nd.key
	if nd.value != "" {
		nd.path += "_" + nd.value
	}
	if s.RateLimit != nil {
		nd.limit = c.rateLimit(s.RateLimit, nd, where+".rate_limit")
	}
	nd.children = c.level(s.Descriptors, nd.path, where+".descriptors")
	return nd
}

// rateLimit compiles a rate_limit block at where; nil when it has a
// problem.
func (c *compiler) rateLimit(s *rateLimitSpec, nd *node, where string) *rateLimit {
	field := func(f string) string { return where + "." + f }
	written := func(f string) bool { return c.d.Written(field(f)) }
	r := &rateLimit{name: nd.path, shadow: nd.shadow, unlimited: s.Unlimited}
	// A field whose value did not decode has its problem already; the
	// checks below only add their own.
	bad := false
	for _, f := range []string{"name", "unit", "requests_per_unit", "unlimited", "replaces", "algorithm",
		"burst", "quota", "quota.time_zone", "quota.anchor_day", "on_failure"} {
		bad = bad || c.d.Bad(field(f))
	}
	fail := func(f, format string, args ...any) {
		c.d.Errorf(field(f), format, args...)
		bad = true
	}
	if written("name") {
		if s.Name == "" {
			fail("name", "must not be empty")
		}
		r.name = s.Name
	}
	for i, rp := range s.Replaces {
		if rp.Name == "" {
			fail(fmt.Sprintf("replaces[%d].name", i), "missing")
			continue
		}
		r.replaces = append(r.replaces, rp.Name)
	}
	if written("unit") {
		u, err := ParseUnit(s.Unit)
		if err != nil {
			fail("unit", "%v", err)
		}
		r.unit = u
	}
	if written("requests_per_unit") && (s.RequestsPerUnit < 0 || s.RequestsPerUnit > math.MaxUint32) {
		fail("requests_per_unit", "%d is out of range [0, %d]", s.RequestsPerUnit, uint32(math.MaxUint32))
	}
	if written("algorithm") {
		a, err := floodgate.ParseAlgorithm(s.Algorithm)
		if k := a.Kind(); err == nil && k != floodgate.KindRate && k != floodgate.KindQuota {
			err = fmt.Errorf("%s is not available over RLS (no delays, no leases)", s.Algorithm)
		}
		if err != nil {
			fail("algorithm", "%v", err)
		}
		r.tmpl.algorithm = a
	}
	if written("burst") {
		if s.Burst < 1 || s.Burst > math.MaxInt32 {
			fail("burst", "%d is out of range [1, %d]", s.Burst, math.MaxInt32)
		}
		r.tmpl.burst = s.Burst
	}
	if q := s.Quota; q != nil {
		if written("quota.time_zone") {
			loc, err := time.LoadLocation(q.TimeZone)
			if err != nil {
				fail("quota.time_zone", "unknown time zone %q", q.TimeZone)
			}
			r.tmpl.location = loc
		}
		if written("quota.anchor_day") {
			if q.AnchorDay < 1 || q.AnchorDay > 31 {
				fail("quota.anchor_day", "%d is out of range [1, 31]", q.AnchorDay)
			}
			r.tmpl.anchorDay = int(q.AnchorDay)
		}
	}
	if written("on_failure") {
		p, err := floodgate.ParseFailurePolicy(s.OnFailure)
		if err != nil {
			fail("on_failure", "want allow, deny or local, got %q", s.OnFailure)
		}
		r.tmpl.onFailure = p
	}
	if bad {
		return nil
	}
	if r.unlimited {
		if written("requests_per_unit") || written("unit") {
			// envoyproxy/ratelimit rejects unit and requests_per_unit
			// together with unlimited; so do we.
			at := field("requests_per_unit")
			if !written("requests_per_unit") {
				at = field("unit")
			}
			c.d.ErrorOf(at, field("unlimited"), "an unlimited rate limit takes no unit or requests_per_unit")
			return nil
		}
		return r
	}
	if !written("unit") {
		fail("unit", "missing")
	}
	if !written("requests_per_unit") {
		fail("requests_per_unit", "missing")
	}
	if bad {
		return nil
	}
	r.perUnit = uint32(s.RequestsPerUnit)
	if r.tmpl.algorithm == 0 {
		// Weeks and months are calendar periods (in UTC unless the quota
		// block names a zone); every other unit is a fixed window.
		r.tmpl.algorithm = floodgate.FixedWindow
		if s.Quota != nil || r.unit == Week || r.unit == Month {
			r.tmpl.algorithm = floodgate.Quota
		}
	}
	if written("burst") && !r.tmpl.algorithm.Traits().Params.Has(floodgate.ParamBurst) {
		fail("burst", "only token_bucket, gcra and leaky_bucket take a burst")
	}
	if s.Quota != nil && r.tmpl.algorithm.Family() != floodgate.FamilyQuota {
		fail("quota", "only the quota algorithm takes a quota block")
	}
	if r.tmpl.algorithm.Family() == floodgate.FamilyQuota && r.unit != Day && r.unit != Week && r.unit != Month {
		at := field("unit")
		if written("algorithm") {
			at = field("algorithm")
		}
		c.d.ErrorOf(at, field("unit"), "a calendar quota needs unit day, week or month, got %s", r.unit)
		bad = true
	}
	if bad {
		return nil
	}
	if r.perUnit == 0 {
		// Blocked: every request is over the limit; no counter needed.
		r.fields = fields.NewLimit(&floodgate.Limit{Name: r.name, Algorithm: floodgate.FixedWindow,
			Max: 0, Window: time.Duration(r.unit.seconds()) * time.Second})
		return r
	}
	l, err := r.tmpl.limit(r.name, r.unit, 1, int64(r.perUnit))
	if err != nil {
		c.d.Errorf(where, "%v", err)
		return nil
	}
	r.rule, err = limiter.NewRule(l, r.tmpl.onFailure, r.shadow)
	if err != nil {
		c.d.Errorf(where, "%v", err)
		return nil
	}
	r.fields = fields.ForRule(r.rule)
	return r
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

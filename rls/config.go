package rls

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/internal/watch"
	"github.com/floodgate/floodgate/internal/yamlfile"
	"github.com/floodgate/floodgate/internal/zone"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/metrics"
)

// ErrConfig marks every configuration error of Load and Parse: errors.Is
// reports it for their errors, whose message holds every problem, one per
// line, as "file:line:col: field: message" (the same format, and type, as
// config.Errors).
var ErrConfig = errors.New("rls: invalid configuration")

// DefaultMaxFiles and DefaultMaxBytes bound what one Load (and every
// reload of Watch) reads when LoadOptions leave MaxFiles and MaxBytes
// zero: the number of descriptor files, and their bytes in all. Loading
// costs about 80 times the bytes read (parse trees, positions, compiled
// limits), so without a total bound a directory that grows (a templating
// loop, a sync tool duplicating files) could take the process's memory
// at a reload. envoyproxy/ratelimit deployments have a few files of a
// few KB each; the bounds leave room for a thousand such files and for
// one file as large as a single file may be (yamlfile.MaxFileSize).
const (
	DefaultMaxFiles = 1024
	DefaultMaxBytes = yamlfile.MaxFileSize
)

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
// They are also the lengths of envoyproxy/ratelimit's windows, which it
// aligns to the Unix epoch.
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

// countMax is the capacity of the counting rules of the compatibility
// mode: far more than any window sees, and exact in the doubles of Redis
// scripts.
const countMax = 1 << 50

// Config is a set of domains loaded from files in the envoyproxy/ratelimit
// format. It is immutable once loaded and safe for concurrent use.
type Config struct {
	domains map[string]*domain
	// version hashes the files the configuration was read from (see
	// watch.Hash), so that Watch can tell whether they changed since.
	version [sha256.Size]byte
	// none marks the stand-in of LoadOrWait: no configuration yet.
	none bool
	// warnings are the parts of the files that were read but mean
	// nothing, one "file:line:col: field: message" each.
	warnings []string
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

// Warnings lists what the files hold that Floodgate reads but ignores, as
// envoyproxy/ratelimit does (a key where it has no meaning, a
// requests_per_unit next to unlimited, a missing requests_per_unit that
// makes the limit block every request), one "file:line:col: field:
// message" each.
func (c *Config) Warnings() []string { return c.warnings }

type domain struct {
	name   string
	files  []string
	root   level
	compat bool
	// limits are the domain's rate limits in file order, for Dump.
	limits []*rateLimit
	// names holds the name of every configured rate limit, of every
	// domain (shared by the domains of one Config), so that a limit given
	// in a request is never named as one of them (see overrideName).
	names map[string]bool
}

// level is one list of descriptors: the top-level list of a domain or the
// nested list of one descriptor.
type level struct {
	exact    map[entryKey]*node // key and value given
	wild     map[string][]*node // key → values with a '*', in file order
	wildBest map[string][]*node // the same, the most literal characters first
	anyValue map[string]*node   // key only: any value, one counter per value
	// composite holds every descriptor by envoyproxy/ratelimit's name for
	// it (key, or key_value), which must be unique in a level.
	composite map[string]*node
}

type entryKey struct{ key, value string }

// node is one configured descriptor.
type node struct {
	key, value string // value "" matches any value; with '*' a pattern
	parts      []string
	limit      *rateLimit
	shadow     bool
	quotaMode  bool
	detailed   bool
	// valueToMetric and shareThreshold shape the statistics' names and,
	// for shareThreshold, the counters (see Service).
	valueToMetric  bool
	shareThreshold bool
	metadata       *structpb.Struct
	children       level
	// path is domain.key_value.key ...: the default limit name and the
	// name of the limit's statistics.
	path string
	// file and line locate the descriptor, for messages.
	file string
}

// wildcard reports whether the node's value is a pattern.
func (nd *node) wildcard() bool { return nd.parts != nil }

// matches reports whether value matches the node's pattern: every '*'
// stands for any run of characters (none included), the literal parts
// must appear in order, the first at the start and the last at the end.
func (nd *node) matches(value string) bool {
	p := nd.parts
	first, last := p[0], p[len(p)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, mid := range p[1 : len(p)-1] {
		i := strings.Index(rest, mid)
		if i < 0 {
			return false
		}
		rest = rest[i+len(mid):]
	}
	return true
}

// answerName is the limit's name in an answer's current_limit: its name,
// or when that is longer than fields.MaxNameLen (a name a request built
// from its descriptor values) the short stable form the rate-limit fields
// tell it by. Envoy writes it into X-RateLimit-Limit; envoyproxy/ratelimit
// names a limit given in a request "" there.
func (r *rateLimit) answerName() string {
	if len(r.name) <= fields.MaxNameLen || r.fields == nil {
		return r.name
	}
	return r.fields.Name
}

// literal counts the characters of the pattern that are not '*'.
func (nd *node) literal() int { return len(nd.value) - (len(nd.parts) - 1) }

// rateLimit is the rate_limit block of a descriptor, compiled.
type rateLimit struct {
	// name is the limit's name in Floodgate's answers and metrics: the
	// configured name, else the descriptor's path.
	name string
	// configName is the name as configured ("" when none): replaces
	// name it, and the compatibility mode answers with it.
	configName string
	unit       Unit
	perUnit    uint32
	unlimited  bool
	replaces   []string
	shadow     bool
	quotaMode  bool
	metadata   *structpb.Struct
	detailed   bool
	// statPath is envoyproxy/ratelimit's name for the limit's statistics
	// (the descriptor's path).
	statPath string
	// rule is nil when unlimited or when requests_per_unit is 0 (every
	// request is over the limit, envoyproxy/ratelimit's way to block).
	rule *limiter.Rule
	// shadowRule is rule in shadow mode, for quota mode: the same
	// counters, without stopping the request (nil when rule is shadow).
	shadowRule *limiter.Rule
	// count is the compatibility mode's counting rule: a fixed window as
	// long as the unit that never denies, whose Remaining tells how many
	// hits the window has seen.
	count *limiter.Rule
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
	// AllFiles reads every file of a directory whatever its name, as
	// envoyproxy/ratelimit reads its runtime directory.
	AllFiles bool
	// Recursive reads the directories inside directories too.
	Recursive bool
	// DotFiles reads the files and directories whose names start with a
	// dot (envoyproxy/ratelimit does unless RUNTIME_IGNOREDOTFILES is
	// true).
	DotFiles bool
	// MergeDomains lets several files define one domain: their descriptors
	// are put together (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG). A
	// descriptor given in two files is still an error.
	MergeDomains bool
	// Compat puts every domain in the compatibility mode (see package
	// doc), as a file does for its own domain with "compat: true".
	Compat bool
	// App, when set, reads of each directory path only what
	// envoyproxy/ratelimit reads there as the files of its
	// RUNTIME_APPDIRECTORY when it watches RUNTIME_ROOT
	// (RUNTIME_WATCH_ROOT=true): it names the files by their paths with
	// '.' for '/' and takes those starting with App and a dot, so the
	// directory named App and every file or directory whose name starts
	// with App and a dot ("config.yaml" and "config.d/" beside "config/").
	// A directory with none of them is reported as App missing.
	App string
	// MaxFiles bounds the number of files read; zero means
	// DefaultMaxFiles. More files is an error naming the paths, the
	// count and the bound, and nothing is loaded.
	MaxFiles int
	// MaxBytes bounds the bytes of all the files read together; zero
	// means DefaultMaxBytes. Reading stops past it, with an error naming
	// the paths, the total and the bound, and nothing is loaded.
	MaxBytes int64
}

// maxFiles is the bound on the number of files, default applied.
func (opts LoadOptions) maxFiles() int {
	if opts.MaxFiles > 0 {
		return opts.MaxFiles
	}
	return DefaultMaxFiles
}

// maxBytes is the bound on the bytes of all the files, default applied.
func (opts LoadOptions) maxBytes() int64 {
	if opts.MaxBytes > 0 {
		return opts.MaxBytes
	}
	return DefaultMaxBytes
}

// tooManyFiles is the problem of n files listed for paths, more than
// opts allow.
func tooManyFiles(paths []string, n int, opts LoadOptions) *yamlfile.Error {
	return &yamlfile.Error{File: strings.Join(paths, ", "),
		Msg: fmt.Sprintf("%d descriptor files, more than the %d allowed; nothing was loaded", n, opts.maxFiles())}
}

// tooManyBytes is the problem of files of paths holding more than total
// bytes together, more than opts allow.
func tooManyBytes(paths []string, total int64, opts LoadOptions) *yamlfile.Error {
	return &yamlfile.Error{File: strings.Join(paths, ", "),
		Msg: fmt.Sprintf("descriptor files of at least %d bytes in all, more than the %d allowed; nothing was loaded",
			total, opts.maxBytes())}
}

// sizeBound reports files whose sizes, as the file system gives them,
// add up to more than opts allow, before they are read.
func sizeBound(paths, files []string, opts LoadOptions) *yamlfile.Error {
	var total int64
	for _, f := range files {
		if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() {
			total += st.Size()
			if total > opts.maxBytes() {
				return tooManyBytes(paths, total, opts)
			}
		}
	}
	return nil
}

// checkBytes reports files of v holding more bytes than opts allow.
func checkBytes(paths []string, v *watch.Version, opts LoadOptions) error {
	var total int64
	for _, f := range v.Files {
		total += int64(len(f.Data))
	}
	if total > opts.maxBytes() {
		return invalid(yamlfile.Errors{tooManyBytes(paths, total, opts)})
	}
	return nil
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
// a YAML extension are read in name order, not recursively, unless opts
// say otherwise), and returns the configuration of all the domains they
// define. A domain defined twice is an error unless opts.MergeDomains. The
// error reports every problem of every file (see package doc).
func Load(paths []string, opts LoadOptions) (*Config, error) {
	v, err := readVersion(paths, opts)
	if err != nil {
		return nil, err
	}
	return build(v, opts)
}

// LoadOrWait loads as Load does. When the files do not make a
// configuration it returns, with the error, a stand-in: a Service given
// it answers every request with ErrNoConfig (as envoyproxy/ratelimit does
// until a configuration loads) and Watch, given that Service, loads the
// next version of the files but not the one that failed.
func LoadOrWait(paths []string, opts LoadOptions) (*Config, error) {
	wait := &Config{domains: map[string]*domain{}, none: true}
	v, err := readVersion(paths, opts)
	if err != nil {
		return wait, err
	}
	cfg, err := build(v, opts)
	if err != nil {
		wait.version = v.Hash
		return wait, err
	}
	return cfg, nil
}

// readVersion reads the files Load reads for paths.
func readVersion(paths []string, opts LoadOptions) (*watch.Version, error) {
	files, errs := configFiles(paths, opts)
	if len(errs) > 0 {
		return nil, invalid(errs)
	}
	if bad := sizeBound(paths, files, opts); bad != nil {
		return nil, invalid(yamlfile.Errors{bad})
	}
	v := &watch.Version{Files: make([]watch.File, 0, len(files))}
	var total int64
	for _, f := range files {
		// Not os.ReadFile: a named pipe at a path (or linked from a
		// directory read) must not hang the start, nor a huge file take
		// its memory.
		b, err := yamlfile.ReadFile(f)
		var bad yamlfile.Errors
		if errors.As(err, &bad) {
			errs = append(errs, bad...)
			continue
		}
		if err != nil {
			errs = append(errs, unreadable(f, err))
			continue
		}
		// The sizes seen before reading may have grown since.
		if total += int64(len(b)); total > opts.maxBytes() {
			return nil, invalid(yamlfile.Errors{tooManyBytes(paths, total, opts)})
		}
		v.Files = append(v.Files, watch.File{Path: f, Data: b})
	}
	if len(errs) > 0 {
		return nil, invalid(errs)
	}
	v.Hash = watch.Hash(v.Files)
	return v, nil
}

// configFiles lists the files Load reads for paths.
func configFiles(paths []string, opts LoadOptions) ([]string, yamlfile.Errors) {
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
		if opts.App != "" {
			files, errs = appFiles(p, opts, files, errs)
			continue
		}
		files, errs = dirFiles(p, opts, files, errs)
	}
	if len(files) > opts.maxFiles() {
		errs = append(errs, tooManyFiles(paths, len(files), opts))
	}
	return files, errs
}

// appFiles appends the files of the directory dir that Load reads with
// opts.App: those of the directory named App (or a link to one), and of
// every file or directory whose name starts with App and a dot.
func appFiles(dir string, opts LoadOptions, files []string, errs yamlfile.Errors) ([]string, yamlfile.Errors) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return files, append(errs, unreadable(dir, err))
	}
	found := false
	for _, e := range ents {
		name := e.Name()
		if name != opts.App && !strings.HasPrefix(name, opts.App+".") {
			continue
		}
		if !opts.DotFiles && strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(dir, name)
		st, err := os.Stat(path)
		switch {
		case err != nil:
			continue // a link to nothing, as dirFiles skips one
		case st.IsDir():
			found = true
			if name == opts.App || opts.Recursive {
				files, errs = dirFiles(path, opts, files, errs)
			}
		case name != opts.App && st.Mode().IsRegular():
			// A file named App alone is no file of App's: its name has
			// no dot after App.
			found = true
			if opts.takes(name) {
				files = append(files, path)
			}
		}
	}
	if !found {
		_, err := os.Stat(filepath.Join(dir, opts.App))
		if err == nil {
			err = syscall.ENOTDIR
		}
		errs = append(errs, unreadable(filepath.Join(dir, opts.App), err))
	}
	return files, errs
}

// takes says whether a directory's file of this name is read: any, with
// AllFiles, else one with an extension of Extensions.
func (opts LoadOptions) takes(name string) bool {
	if opts.AllFiles {
		return true
	}
	exts := opts.Extensions
	if exts == nil {
		exts = []string{".yaml", ".yml"}
	}
	for _, x := range exts {
		if strings.EqualFold(filepath.Ext(name), x) {
			return true
		}
	}
	return false
}

// dirFiles appends the files of the directory dir that Load reads.
func dirFiles(dir string, opts LoadOptions, files []string, errs yamlfile.Errors) ([]string, yamlfile.Errors) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return files, append(errs, unreadable(dir, err))
	}
	for _, e := range ents {
		if !opts.DotFiles && strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		switch t := e.Type(); {
		case t.IsDir():
			if opts.Recursive {
				files, errs = dirFiles(path, opts, files, errs)
			}
			continue
		case t&fs.ModeSymlink != 0:
			// A link to a file is read; a link to a directory is not
			// followed (as envoyproxy/ratelimit's runtime loader).
			if st, err := os.Stat(path); err == nil && st.IsDir() {
				continue
			}
		case !t.IsRegular():
			continue
		}
		if opts.takes(e.Name()) {
			files = append(files, path)
		}
	}
	return files, errs
}

// Parse reads one file's contents; name is used in error messages.
func Parse(name string, src []byte) (*Config, error) {
	return ParseWith(name, src, LoadOptions{})
}

// ParseWith is Parse with the options that apply to one file (Compat).
func ParseWith(name string, src []byte, opts LoadOptions) (*Config, error) {
	files := []watch.File{{Path: name, Data: src}}
	return build(&watch.Version{Files: files, Hash: watch.Hash(files)}, opts)
}

// build decodes and compiles the files of v.
func build(v *watch.Version, opts LoadOptions) (*Config, error) {
	c := &Config{domains: map[string]*domain{}, version: v.Hash}
	var errs, warns yamlfile.Errors
	for _, f := range v.Files {
		spec, d, problems, w := parseFile(f.Path, f.Data, opts.Compat)
		warns = append(warns, w...)
		if problems != nil {
			errs = append(errs, problems...)
			continue
		}
		cc := &compiler{d: d, cfg: c, opts: opts, warns: &warns}
		cc.file(spec)
		errs = append(errs, d.Problems()...)
	}
	if len(errs) > 0 {
		return nil, invalid(errs)
	}
	names := map[string]bool{}
	for _, dom := range c.domains {
		for _, r := range dom.limits {
			names[r.name] = true
		}
		dom.names = names
	}
	for _, w := range warns.Sorted() {
		c.warnings = append(c.warnings, w.Error())
	}
	return c, nil
}

// compiler turns the descriptors of one decoded file into the domain's
// matching tree and limits, reporting problems at the fields' positions.
type compiler struct {
	d     *yamlfile.Decoder
	cfg   *Config
	opts  LoadOptions
	dom   *domain
	warns *yamlfile.Errors
}

// warn records something read but ignored at the field's position.
func (c *compiler) warn(field, format string, args ...any) {
	p := c.d.Positions().Of(field)
	*c.warns = append(*c.warns, &yamlfile.Error{File: c.d.File(), Line: p.Line, Column: p.Column, Field: field,
		Msg: fmt.Sprintf(format, args...)})
}

// file compiles a file into its domain.
func (c *compiler) file(spec *fileSpec) {
	switch {
	case c.d.Bad("domain") || c.d.Bad("compat"):
		return
	case !c.d.Written("domain"):
		c.d.Errorf("domain", "missing")
		return
	case spec.Domain == "":
		c.d.Errorf("domain", "must not be empty")
		return
	}
	compat := spec.Compat || c.opts.Compat
	dom := c.cfg.domains[spec.Domain]
	switch {
	case dom == nil:
		dom = &domain{name: spec.Domain, compat: compat}
		c.cfg.domains[dom.name] = dom
	case !c.opts.MergeDomains:
		c.d.Errorf("domain", "domain %q is already defined in %s (merging the files of a domain is an option: MERGE_DOMAIN_CONFIG)",
			spec.Domain, dom.files[0])
		return
	case dom.compat != compat:
		c.d.Errorf("domain", "domain %q is in compatibility mode in one file and not in %s; say the same in every file",
			spec.Domain, dom.files[0])
		return
	}
	dom.files = append(dom.files, c.d.File())
	c.dom = dom
	c.level(spec.Descriptors, &dom.root, dom.name, "descriptors")
}

func (lv *level) init() {
	*lv = level{exact: map[entryKey]*node{}, wild: map[string][]*node{}, wildBest: map[string][]*node{},
		anyValue: map[string]*node{}, composite: map[string]*node{}}
}

// describe names a descriptor in messages.
func (nd *node) describe() string {
	if nd.value == "" {
		return fmt.Sprintf("%q without a value", nd.key)
	}
	return nd.key + "=" + nd.value
}

// level compiles specs into lv (which a merged domain may have filled
// from other files).
func (c *compiler) level(specs []descriptorSpec, lv *level, parent, field string) {
	if lv.composite == nil && len(specs) > 0 {
		lv.init()
	}
	for i := range specs {
		where := fmt.Sprintf("%s[%d]", field, i)
		nd := c.node(&specs[i], parent, where)
		if nd == nil {
			continue
		}
		at := where + ".value"
		if nd.value == "" {
			at = where + ".key"
		}
		composite := nd.key
		if nd.value != "" {
			composite += "_" + nd.value
		}
		if o := lv.composite[composite]; o != nil {
			elsewhere := ""
			if o.file != nd.file {
				elsewhere = " (also in " + o.file + ")"
			}
			if o.key == nd.key && o.value == nd.value {
				c.d.ErrorOf(where, at, "descriptor %s is defined twice at this level%s", nd.describe(), elsewhere)
			} else {
				c.d.ErrorOf(where, at, "descriptors %s and %s%s are one descriptor to envoyproxy/ratelimit (both %q); rename one",
					o.describe(), nd.describe(), elsewhere, composite)
			}
			continue
		}
		lv.composite[composite] = nd
		switch {
		case nd.value == "":
			lv.anyValue[nd.key] = nd
		case nd.wildcard():
			lv.wild[nd.key] = append(lv.wild[nd.key], nd)
			best := append(slices.Clone(lv.wildBest[nd.key]), nd)
			sort.SliceStable(best, func(i, j int) bool { return best[i].literal() > best[j].literal() })
			lv.wildBest[nd.key] = best
		default:
			lv.exact[entryKey{nd.key, nd.value}] = nd
		}
	}
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
	nd := &node{key: s.Key, value: s.Value, shadow: s.ShadowMode, quotaMode: s.QuotaMode, detailed: s.DetailedMetric,
		valueToMetric: s.ValueToMetric, shareThreshold: s.ShareThreshold, metadata: s.Metadata.s, file: c.d.File()}
	nd.path = parent + "." + nd.key
	if nd.value != "" {
		nd.path += "_" + nd.value
	}
	if strings.Contains(nd.value, "*") {
		nd.parts = strings.Split(nd.value, "*")
	}
	if nd.shareThreshold && !strings.Contains(nd.key+nd.value, "*") {
		c.d.Errorf(where+".share_threshold", "share_threshold needs a wildcard value (one with a *), got %q", nd.value)
	}
	if s.RateLimit != nil {
		nd.limit = c.rateLimit(s.RateLimit, nd, where+".rate_limit")
	}
	c.level(s.Descriptors, &nd.children, nd.path, where+".descriptors")
	return nd
}

// rateLimit compiles a rate_limit block at where; nil when it has a
// problem. It accepts what envoyproxy/ratelimit's loader accepts and
// refuses what it refuses.
func (c *compiler) rateLimit(s *rateLimitSpec, nd *node, where string) *rateLimit {
	field := func(f string) string { return where + "." + f }
	written := func(f string) bool { return c.d.Written(field(f)) }
	r := &rateLimit{name: nd.path, configName: s.Name, shadow: nd.shadow, quotaMode: nd.quotaMode,
		unlimited: s.Unlimited, metadata: nd.metadata, detailed: nd.detailed, statPath: nd.path}
	if s.Name != "" {
		r.name = s.Name
	}
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
	for i, rp := range s.Replaces {
		switch {
		case rp.Name == "":
			fail(fmt.Sprintf("replaces[%d].name", i), "missing")
		case rp.Name == s.Name:
			fail(fmt.Sprintf("replaces[%d].name", i), "a limit cannot replace itself (%q is this limit's name)", rp.Name)
		default:
			r.replaces = append(r.replaces, rp.Name)
		}
	}
	unit, unitErr := ParseUnit(s.Unit)
	if r.unlimited {
		switch {
		case written("unit") && unitErr == nil:
			c.d.ErrorOf(field("unit"), field("unlimited"), "an unlimited rate limit takes no unit")
			bad = true
		case written("unit"):
			c.warn(field("unit"), "ignored: the limit is unlimited")
		}
		if written("requests_per_unit") {
			c.warn(field("requests_per_unit"), "ignored: the limit is unlimited")
		}
		for _, f := range []string{"algorithm", "burst", "quota", "on_failure"} {
			if written(f) {
				fail(f, "an unlimited rate limit takes no %s", f)
			}
		}
		if bad {
			return nil
		}
		c.dom.limits = append(c.dom.limits, r)
		return r
	}
	switch {
	case !written("unit"):
		fail("unit", "missing")
	case unitErr != nil:
		fail("unit", "%v", unitErr)
	}
	r.unit = unit
	switch {
	case !written("requests_per_unit"):
		c.warn(where, "requests_per_unit is missing: it is 0, so every request is over the limit (as envoyproxy/ratelimit reads it)")
	case s.RequestsPerUnit < 0 || s.RequestsPerUnit > math.MaxUint32:
		fail("requests_per_unit", "%d is out of range [0, %d]", s.RequestsPerUnit, uint32(math.MaxUint32))
	}
	c.extensions(s, r, where, &bad)
	if bad {
		return nil
	}
	r.perUnit = uint32(s.RequestsPerUnit)
	if !c.build(r, where) {
		return nil
	}
	c.dom.limits = append(c.dom.limits, r)
	return r
}

// extensions reads Floodgate's keys of a rate_limit block into r.tmpl.
func (c *compiler) extensions(s *rateLimitSpec, r *rateLimit, where string, bad *bool) {
	field := func(f string) string { return where + "." + f }
	written := func(f string) bool { return c.d.Written(field(f)) }
	fail := func(f, format string, args ...any) {
		c.d.Errorf(field(f), format, args...)
		*bad = true
	}
	if written("algorithm") {
		a, err := floodgate.ParseAlgorithm(s.Algorithm)
		if k := a.Kind(); err == nil && k != floodgate.KindRate && k != floodgate.KindQuota {
			err = fmt.Errorf("%s is not available over RLS (no delays, no leases)", s.Algorithm)
		}
		if err == nil && c.dom.compat && a != floodgate.FixedWindow {
			err = fmt.Errorf("%s is not available in compatibility mode, which counts fixed windows as envoyproxy/ratelimit does", s.Algorithm)
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
		if c.dom.compat {
			fail("quota", "calendar quotas are not available in compatibility mode, which counts fixed windows as envoyproxy/ratelimit does")
		}
		if written("quota.time_zone") {
			loc, err := zone.Load(q.TimeZone)
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
	if *bad {
		return
	}
	if r.tmpl.algorithm == 0 {
		// Weeks and months are calendar periods (in UTC unless the quota
		// block names a zone); every other unit is a fixed window. The
		// compatibility mode counts fixed windows of every unit.
		r.tmpl.algorithm = floodgate.FixedWindow
		if !c.dom.compat && (s.Quota != nil || r.unit == Week || r.unit == Month) {
			r.tmpl.algorithm = floodgate.Quota
		}
	}
	if written("burst") && !r.tmpl.algorithm.Traits().Params.Has(floodgate.ParamBurst) {
		fail("burst", "only %s take a burst", floodgate.AlgorithmList(func(t *floodgate.Traits) bool {
			return t.Kind == floodgate.KindRate && t.Params.Has(floodgate.ParamBurst)
		}))
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
		*bad = true
	}
}

// build makes the rules of a limited rate limit; false after a problem.
func (c *compiler) build(r *rateLimit, where string) bool {
	var err error
	if r.count, err = countRule(r.unit, r.tmpl.onFailure); err != nil {
		c.d.Errorf(where, "%v", err)
		return false
	}
	if r.perUnit == 0 {
		// Blocked: every request is over the limit; no counter needed.
		r.fields = fields.NewLimit(&floodgate.Limit{Name: r.name, Algorithm: floodgate.FixedWindow,
			Max: 0, Window: time.Duration(r.unit.seconds()) * time.Second})
		return true
	}
	l, err := r.tmpl.limit(r.name, r.unit, 1, int64(r.perUnit))
	if err == nil {
		r.rule, err = configuredRule(l, r.tmpl.onFailure, r.shadow)
	}
	if err == nil && !r.shadow {
		// For quota mode, the descriptor's or the service's (QuotaMode).
		r.shadowRule, err = configuredRule(l, r.tmpl.onFailure, true)
	}
	var pe *floodgate.ParamError
	switch {
	case errors.As(err, &pe):
		c.d.Errorf(c.paramField(where, pe.Param), "%s", pe.Msg)
		return false
	case err != nil:
		c.d.Errorf(where, "%v", err)
		return false
	}
	r.fields = fields.ForRule(r.rule)
	return true
}

// paramField is the field of the rate_limit block at where that gives a
// parameter of its limit, where the limit's problems with the parameter
// are reported: requests_per_unit is the rate or the count, unit the span,
// and burst, when left out, is requests_per_unit.
func (c *compiler) paramField(where string, p floodgate.Param) string {
	switch p {
	case floodgate.ParamRate, floodgate.ParamMax:
		return where + ".requests_per_unit"
	case floodgate.ParamPer, floodgate.ParamWindow, floodgate.ParamPeriod:
		return where + ".unit"
	case floodgate.ParamBurst:
		if c.d.Written(where + ".burst") {
			return where + ".burst"
		}
		return where + ".requests_per_unit"
	case floodgate.ParamAnchorDay:
		return where + ".quota.anchor_day"
	case floodgate.ParamTimeZone:
		return where + ".quota.time_zone"
	}
	return where
}

// countRule is the compatibility mode's counting rule for a unit: a fixed
// window of one unit (aligned to the epoch, like envoyproxy/ratelimit's)
// that never denies. Every limit of the unit counts with it, on the
// descriptor's counter key, so that the counters are
// envoyproxy/ratelimit's: one per domain, descriptor entries and window,
// whatever limit (configured or given in the request) applies.
func countRule(unit Unit, onFailure floodgate.FailurePolicy) (*limiter.Rule, error) {
	return configuredRule(floodgate.Limit{Name: "compat." + unit.String(), Algorithm: floodgate.FixedWindow, Max: countMax,
		Window: time.Duration(unit.seconds()) * time.Second}, onFailure, false)
}

// configuredRule is limiter.NewRule for a limit whose name comes from the
// descriptor files (or is one of the counting rules' few), marked so that
// Floodgate's metrics give it a series of its own, which the names given
// in requests never take (metrics.Configured).
func configuredRule(l floodgate.Limit, onFailure floodgate.FailurePolicy, shadow bool) (*limiter.Rule, error) {
	r, err := limiter.NewRule(l, onFailure, shadow)
	if err != nil {
		return nil, err
	}
	return metrics.Configured(r), nil
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

// Dump writes the configuration as envoyproxy/ratelimit's debug port
// shows it (/rlconfig): one line per limit, "path: unit=UNIT
// requests_per_unit=N, shadow_mode: B, quota_mode: B", in domain and file
// order.
func (c *Config) Dump() string {
	var b strings.Builder
	for _, name := range c.Domains() {
		for _, r := range c.domains[name].limits {
			unit := "UNKNOWN"
			if !r.unlimited {
				unit = strings.ToUpper(r.unit.String())
			}
			fmt.Fprintf(&b, "%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t\n",
				r.statPath, unit, r.perUnit, r.shadow, r.quotaMode)
		}
	}
	return b.String()
}

package limiter

import (
	"fmt"
	"hash/fnv"
	"hash/maphash"
	"reflect"
	"strconv"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
)

// Rule is a compiled limit as the engine and the stores use it. It is
// immutable once NewRule made it, and safe to share. Besides the limit it
// holds what the engine, the stores and the front ends prepare from it
// (see Prepared), so that those live and die with the rule.
type Rule struct {
	limit       floodgate.Limit
	params      algo.Params
	onFailure   floodgate.FailurePolicy
	shadow      bool
	consistency floodgate.Consistency
	id          string
	idHash      uint64 // HashID(id)

	prepared preparedForms
}

// Limit returns (a copy of) the limit the rule was made from.
func (r *Rule) Limit() floodgate.Limit { return r.limit }

// Name returns the limit's name.
func (r *Rule) Name() string { return r.limit.Name }

// Algorithm returns the limit's algorithm.
func (r *Rule) Algorithm() floodgate.Algorithm { return r.limit.Algorithm }

// Params returns the compiled parameters the algorithms decide with. They
// cannot be changed through the pointer (algo.Params has no exported
// fields and no method that modifies it).
func (r *Rule) Params() *algo.Params { return &r.params }

// Capacity returns the largest cost a single request can have.
func (r *Rule) Capacity() int64 { return r.params.Capacity() }

// OnFailure returns what the rule does when its store cannot answer.
func (r *Rule) OnFailure() floodgate.FailurePolicy { return r.onFailure }

// Shadow reports a shadow rule: evaluated and counted, never blocking.
func (r *Rule) Shadow() bool { return r.shadow }

// Consistency returns how the instances sharing the store keep the rule
// (see LeaseOptions for Leased).
func (r *Rule) Consistency() floodgate.Consistency { return r.consistency }

// ID names the rule's counters in a store: the limit's name and a
// fingerprint of its parameters, so that a changed limit starts afresh and
// an unchanged one keeps its counts across reloads (or the ID of the rule
// RuleOptions.CountsAs names).
func (r *Rule) ID() string { return r.id }

// IDHash returns HashID(r.ID()), worked out once when the rule was made,
// for stores that index counters by a hash of the rule ID and the key.
func (r *Rule) IDHash() uint64 { return r.idHash }

// idSeed seeds HashID for this process.
var idSeed = maphash.MakeSeed()

// HashID returns a hash of a rule ID, the same for equal IDs within this
// process (it is seeded once per process, so it must not be stored). The
// empty ID, that of the zero Rule, hashes to 0.
func HashID(id string) uint64 {
	if id == "" {
		return 0
	}
	return maphash.String(idSeed, id)
}

// RuleOptions are the settings of a rule beyond its limit. The zero value
// is an enforced, exact rule that falls back to a local share (FailLocal).
type RuleOptions struct {
	// OnFailure is what the rule does when its store cannot answer.
	OnFailure floodgate.FailurePolicy
	// Shadow makes a shadow rule: evaluated and counted, never blocking.
	Shadow bool
	// Consistency is Exact (every decision asks the store) or Leased
	// (each instance spends units taken in advance; only for algorithms
	// whose traits say Leasable, and not in shadow mode). A rule's
	// counters are the same either way, so switching keeps them.
	Consistency floodgate.Consistency
	// CountsAs, when set, makes the rule count in the counters of that
	// rule: it takes its ID. Only a quota that differs from it in Max
	// alone may (a usage plan's quota given another size for one key):
	// what the period counted so far holds against the new size, so a
	// size lowered below it refuses until the period ends.
	CountsAs *Rule
}

// NewRule validates and compiles a limit.
func NewRule(l floodgate.Limit, onFailure floodgate.FailurePolicy, shadow bool) (*Rule, error) {
	return NewRuleWith(l, RuleOptions{OnFailure: onFailure, Shadow: shadow})
}

// NewRuleWith validates and compiles a limit with its settings.
func NewRuleWith(l floodgate.Limit, o RuleOptions) (*Rule, error) {
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("limiter: %w", err)
	}
	switch {
	case o.Consistency > floodgate.Leased:
		return nil, fmt.Errorf("limiter: %s: %w: unknown consistency %d", l.Name, floodgate.ErrInvalidLimit, o.Consistency)
	case o.Consistency == floodgate.Leased && !l.Algorithm.Traits().Leasable:
		return nil, fmt.Errorf("limiter: %s: %w: %s cannot be leased (%s can)",
			l.Name, floodgate.ErrInvalidLimit, l.Algorithm, floodgate.AlgorithmList(func(t *floodgate.Traits) bool { return t.Leasable }))
	case o.Consistency == floodgate.Leased && o.Shadow:
		return nil, fmt.Errorf("limiter: %s: %w: a shadow rule cannot be leased", l.Name, floodgate.ErrInvalidLimit)
	}
	p, err := algo.Compile(&l)
	if err != nil {
		return nil, fmt.Errorf("limiter: %w", err)
	}
	id, err := ruleID(&l)
	if err != nil {
		return nil, err
	}
	if b := o.CountsAs; b != nil {
		if err := sameCounters(&l, b); err != nil {
			return nil, err
		}
		id = b.id
	}
	return &Rule{limit: l, params: p, onFailure: o.OnFailure, shadow: o.Shadow, consistency: o.Consistency, id: id, idHash: HashID(id)}, nil
}

// sameCounters reports, as an error, a limit l that cannot count in the
// counters of rule b: one that is not a quota, or differs from b's limit
// in more than its Max.
func sameCounters(l *floodgate.Limit, b *Rule) error {
	if l.Algorithm.Family() != floodgate.FamilyQuota || b.limit.Algorithm != l.Algorithm {
		return fmt.Errorf("limiter: %s: %w: only a quota counts in another rule's counters", l.Name, floodgate.ErrInvalidLimit)
	}
	m := *l
	m.Name, m.Max = b.limit.Name, b.limit.Max
	if id, err := ruleID(&m); err != nil || id != b.id {
		return fmt.Errorf("limiter: %s: %w: it counts as %s only if their limits differ in size alone", l.Name, floodgate.ErrInvalidLimit, b.id)
	}
	return nil
}

// ruleID is the limit's name followed by a short fingerprint of every
// other field of the limit (see idFields).
func ruleID(l *floodgate.Limit) (string, error) {
	if limitPrint.err != nil {
		return "", limitPrint.err
	}
	h := fnv.New64a()
	h.Write(limitPrint.append(make([]byte, 0, 128), reflect.ValueOf(l).Elem()))
	name := l.Name
	if name == "" {
		name = l.Algorithm.String()
	}
	return name + "." + strconv.FormatUint(h.Sum64()&0xffffffffff, 36), nil
}

// idFields are the fields of floodgate.Limit that rule IDs have always
// fingerprinted, in the order they are written, each one even when zero.
// Every other field but Name is written after them, as "|Field=value" and
// only when it is not zero: a field added to Limit changes the IDs of the
// limits that set it, and of no other (a rolling upgrade keeps their
// counters).
var idFields = []string{"Algorithm", "Rate", "Per", "Burst", "Delay", "Max", "Window", "LeaseTTL",
	"Period", "Location", "AnchorDay", "Offset", "Start"}

var limitPrint = newFingerprint(reflect.TypeFor[floodgate.Limit](), idFields)

// fingerprint writes the fields of one struct type but Name, the values of
// some always and in a set order, then those of the others that are not
// zero, with their names.
type fingerprint struct {
	always []int // field indexes
	others []int
	names  []string // of others
	// err reports a field the fingerprint cannot write.
	err error
}

var (
	locationType = reflect.TypeFor[*time.Location]()
	timeType     = reflect.TypeFor[time.Time]()
)

func newFingerprint(t reflect.Type, always []string) *fingerprint {
	f := &fingerprint{}
	index := map[string]int{}
	for i := range t.NumField() {
		sf := t.Field(i)
		index[sf.Name] = i
		switch sf.Type {
		case locationType, timeType:
			if sf.IsExported() {
				continue
			}
		}
		switch sf.Type.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8,
			reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.String, reflect.Bool:
		default:
			f.err = fmt.Errorf("limiter: rule IDs cannot fingerprint %s.%s, a %s", t.Name(), sf.Name, sf.Type)
			return f
		}
	}
	listed := map[string]bool{"Name": true}
	for _, name := range always {
		i, ok := index[name]
		if !ok {
			f.err = fmt.Errorf("limiter: rule IDs fingerprint %s.%s, which is gone", t.Name(), name)
			return f
		}
		f.always = append(f.always, i)
		listed[name] = true
	}
	for i := range t.NumField() {
		if name := t.Field(i).Name; !listed[name] {
			f.others, f.names = append(f.others, i), append(f.names, name)
		}
	}
	return f
}

// append writes the fields of v, a struct of the fingerprint's type.
func (f *fingerprint) append(b []byte, v reflect.Value) []byte {
	for n, i := range f.always {
		if n > 0 {
			b = append(b, '|')
		}
		b = appendValue(b, v.Field(i), false)
	}
	for n, i := range f.others {
		if fv := v.Field(i); !fv.IsZero() {
			b = append(b, '|')
			b = append(b, f.names[n]...)
			b = append(b, '=')
			b = appendValue(b, fv, true)
		}
	}
	return b
}

// appendValue writes one field as the first IDs did (numbers in decimal, a
// zone by name, an instant in Unix nanoseconds); quote quotes strings.
func appendValue(b []byte, v reflect.Value, quote bool) []byte {
	switch v.Type() {
	case locationType:
		if v.IsNil() {
			return b
		}
		return append(b, v.Interface().(*time.Location).String()...)
	case timeType:
		return strconv.AppendInt(b, v.Interface().(time.Time).UnixNano(), 10)
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(b, v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.AppendUint(b, v.Uint(), 10)
	case reflect.Bool:
		return strconv.AppendBool(b, v.Bool())
	case reflect.String:
		if quote {
			return strconv.AppendQuote(b, v.String())
		}
		return append(b, v.String()...)
	}
	return b
}

// PlaceholderRule returns a rule that carries only an ID and decides
// nothing: a store loading saved state holds the state of a rule it has not
// been asked about yet under it, until the first hit of the real rule
// replaces it.
func PlaceholderRule(id string) *Rule { return &Rule{id: id, idHash: HashID(id)} }

package rls

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate/floodgate/internal/yamlfile"
)

// The structs below are a descriptor file as written, before compiling
// (config.go): decoding checks the shape of the file (fields, types,
// duplicates), compiling checks the values and builds the limits. The
// decoder remembers where every field path was written, so that both
// report their problems as "file:line:col: field: message".

// fileSpec is one descriptor file: one domain.
type fileSpec struct {
	Domain      string           `yaml:"domain"`
	Descriptors []descriptorSpec `yaml:"descriptors"`
	// Compat is Floodgate's extension: answer for this domain exactly as
	// envoyproxy/ratelimit does.
	Compat bool `yaml:"compat"`
}

// descriptorSpec is one descriptor and its nested descriptors.
type descriptorSpec struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *rateLimitSpec   `yaml:"rate_limit"`
	Descriptors    []descriptorSpec `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	QuotaMode      bool             `yaml:"quota_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
	Metadata       metadataSpec     `yaml:"metadata"`
}

// rateLimitSpec is a descriptor's rate_limit block, with Floodgate's
// extensions (algorithm, burst, quota, on_failure).
type rateLimitSpec struct {
	Name            string        `yaml:"name"`
	Unit            string        `yaml:"unit"`
	RequestsPerUnit int64         `yaml:"requests_per_unit"`
	Unlimited       bool          `yaml:"unlimited"`
	Replaces        []replaceSpec `yaml:"replaces"`
	Algorithm       string        `yaml:"algorithm"`
	Burst           int64         `yaml:"burst"`
	Quota           *quotaSpec    `yaml:"quota"`
	OnFailure       string        `yaml:"on_failure"`
}

// replaceSpec names a limit that a rate limit replaces.
type replaceSpec struct {
	Name string `yaml:"name"`
}

// quotaSpec is the calendar of a quota.
type quotaSpec struct {
	TimeZone  string `yaml:"time_zone"`
	AnchorDay int64  `yaml:"anchor_day"`
}

// metadataSpec is a descriptor's metadata: any mapping, returned in the
// response's dynamic metadata when the descriptor's limit lets a request
// pass.
type metadataSpec struct {
	s *structpb.Struct
}

// peerKeys are the keys envoyproxy/ratelimit's loader accepts anywhere in
// a file: it checks every key against this one set, then ignores the keys
// its structure has no place for. Floodgate reads such a misplaced key the
// same way (it is ignored) and warns about it.
var peerKeys = []string{"domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit",
	"unlimited", "shadow_mode", "quota_mode", "name", "replaces", "detailed_metric", "value_to_metric",
	"share_threshold", "metadata"}

// The types the hooks decode through: the same structs without the hooks.
type (
	plainFile       fileSpec
	plainDescriptor descriptorSpec
	plainRateLimit  rateLimitSpec
	plainReplace    replaceSpec
)

// parseFile decodes the file name. The decoder it returns holds the
// positions of the fields and the problems found so far, and warnings the
// fields that are read but ignored; when the file cannot be decoded at all
// (syntax, size, alias bombs) it returns that problem instead.
func parseFile(name string, src []byte, twice bool) (*fileSpec, *yamlfile.Decoder, yamlfile.Errors, yamlfile.Errors) {
	root, errs := yamlfile.Read(name, src)
	if errs != nil {
		return nil, nil, errs, nil
	}
	var warnings yamlfile.Errors
	hooks := map[reflect.Type]yamlfile.Hook{
		reflect.TypeFor[fileSpec]():       lenient(reflect.TypeFor[plainFile](), &warnings),
		reflect.TypeFor[descriptorSpec](): lenient(reflect.TypeFor[plainDescriptor](), &warnings),
		reflect.TypeFor[rateLimitSpec]():  lenient(reflect.TypeFor[plainRateLimit](), &warnings),
		reflect.TypeFor[replaceSpec]():    lenient(reflect.TypeFor[plainReplace](), &warnings),
		reflect.TypeFor[metadataSpec]():   decodeMetadata,
	}
	spec := &fileSpec{}
	d := yamlfile.NewDecoder(name, hooks)
	// envoyproxy/ratelimit reads its files with gopkg.in/yaml.v2, whose
	// booleans include YAML 1.1's yes, no, on and off: a file it reads must
	// read here too.
	d.YAML11Bools = true
	if twice {
		d.Twice = func(at *yamlfile.Error) { warnings = append(warnings, at) }
	}
	d.Decode(root, reflect.ValueOf(spec).Elem(), "")
	if d.TooLarge() {
		return nil, nil, d.Problems(), nil
	}
	return spec, d, nil, warnings
}

// lenient decodes a mapping into the struct type plain after dropping the
// keys envoyproxy/ratelimit accepts anywhere but plain has no field for
// (each one a warning).
func lenient(plain reflect.Type, warnings *yamlfile.Errors) yamlfile.Hook {
	own := map[string]bool{}
	for i := range plain.NumField() {
		if tag := plain.Field(i).Tag.Get("yaml"); tag != "" {
			own[tag] = true
		}
	}
	return func(d *yamlfile.Decoder, n *yaml.Node, v reflect.Value, path string) {
		if n.Kind == yaml.MappingNode {
			var kept []*yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := yamlfile.Resolve(n.Content[i])
				if k != nil && k.Kind == yaml.ScalarNode && !own[k.Value] && slices.Contains(peerKeys, k.Value) {
					*warnings = append(*warnings, &yamlfile.Error{File: d.File(), Line: k.Line, Column: k.Column,
						Field: yamlfile.Join(path, k.Value), Msg: "ignored: this key has no meaning here (envoyproxy/ratelimit ignores it too)"})
					continue
				}
				if kept == nil {
					kept = make([]*yaml.Node, 0, len(n.Content))
				}
				kept = append(kept, n.Content[i], n.Content[i+1])
			}
			if len(kept) != len(n.Content) {
				c := *n
				c.Content = kept
				n = &c
			}
		}
		d.Decode(n, v.Addr().Convert(reflect.PointerTo(plain)).Elem(), path)
	}
}

// decodeMetadata reads a descriptor's metadata: a mapping of any shape,
// whose scalars keep their YAML types (numbers, booleans, null, strings).
func decodeMetadata(d *yamlfile.Decoder, n *yaml.Node, v reflect.Value, path string) {
	if yamlfile.IsNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.ErrorAt(n, path, "want a mapping, got %s", yamlfile.KindName(n))
		return
	}
	val, err := metadataValue(d, n, path, 0)
	if d.TooLarge() {
		return // the decoder has the problem
	}
	if err != nil {
		d.ErrorAt(n, path, "%v", err)
		return
	}
	v.Set(reflect.ValueOf(metadataSpec{s: val.GetStructValue()}))
}

// metadataValue converts a YAML node, the value at the field path, into a
// protobuf value. Aliases are followed, so each value inside n counts
// against the values the file may have (d.Count): a few aliases can name a
// huge tree. Once the file has too many it returns nil and d.TooLarge
// reports it; a number without a JSON form (NaN, infinite) and a scalar
// tagged !!bool that is no boolean are reported at their field by d, and
// nil returned. Booleans are read as gopkg.in/yaml.v2 reads them
// (yamlfile.Bool).
func metadataValue(d *yamlfile.Decoder, n *yaml.Node, path string, depth int) (*structpb.Value, error) {
	n = yamlfile.Resolve(n)
	if depth > 32 {
		return nil, fmt.Errorf("nested more than 32 levels deep")
	}
	switch {
	case yamlfile.IsNull(n):
		return structpb.NewNullValue(), nil
	case n.Kind == yaml.MappingNode:
		s := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(n.Content)/2)}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := yamlfile.Resolve(n.Content[i])
			if k == nil || k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: want a scalar key, got %s", n.Content[i].Line, yamlfile.KindName(n.Content[i]))
			}
			if !d.Count(k, path) {
				return nil, nil // the key's bytes count too: the path below copies it
			}
			c, err := metadataChild(d, n.Content[i+1], yamlfile.Join(path, k.Value), depth)
			if c == nil || err != nil {
				return nil, err
			}
			s.Fields[k.Value] = c
		}
		return structpb.NewStructValue(s), nil
	case n.Kind == yaml.SequenceNode:
		l := &structpb.ListValue{Values: make([]*structpb.Value, 0, len(n.Content))}
		for i, c := range n.Content {
			cv, err := metadataChild(d, c, path+"["+strconv.Itoa(i)+"]", depth)
			if cv == nil || err != nil {
				return nil, err
			}
			l.Values = append(l.Values, cv)
		}
		return structpb.NewListValue(l), nil
	case n.Kind == yaml.ScalarNode:
		switch n.Tag {
		case "!!int", "!!float":
			if f, err := strconv.ParseFloat(n.Value, 64); err == nil {
				if math.IsNaN(f) || math.IsInf(f, 0) {
					// No JSON form: an answer carrying it could not be written.
					d.ErrorAt(n, path, "want a finite number, got %q", n.Value)
					return nil, nil
				}
				return structpb.NewNumberValue(f), nil
			}
			if i, err := strconv.ParseInt(n.Value, 0, 64); err == nil {
				return structpb.NewNumberValue(float64(i)), nil
			}
		}
		if b, ok := yamlfile.Bool(n, true); ok {
			return structpb.NewBoolValue(b), nil
		}
		if n.Tag == "!!bool" {
			// Tagged a boolean, and not one (!!bool 1): refused as
			// gopkg.in/yaml.v2 refuses it.
			d.ErrorAt(n, path, "want true or false (or yes, no, on, off, y, n), got %q", n.Value)
			return nil, nil
		}
		return structpb.NewStringValue(n.Value), nil
	}
	return nil, fmt.Errorf("line %d: unexpected %s", n.Line, yamlfile.KindName(n))
}

// metadataChild counts and converts c, a value inside a metadata value at
// depth, written at path.
func metadataChild(d *yamlfile.Decoder, c *yaml.Node, path string, depth int) (*structpb.Value, error) {
	if !d.Count(c, path) {
		return nil, nil
	}
	return metadataValue(d, c, path, depth+1)
}

package rls

import (
	"reflect"

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
}

// descriptorSpec is one descriptor and its nested descriptors.
type descriptorSpec struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *rateLimitSpec   `yaml:"rate_limit"`
	Descriptors    []descriptorSpec `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
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

// parseFile decodes the file name. The decoder it returns holds the
// positions of the fields and the problems found so far; when the file
// cannot be decoded at all (syntax, size, alias bombs) it returns that
// problem instead.
func parseFile(name string, src []byte) (*fileSpec, *yamlfile.Decoder, yamlfile.Errors) {
	root, errs := yamlfile.Read(name, src)
	if errs != nil {
		return nil, nil, errs
	}
	spec := &fileSpec{}
	d := yamlfile.NewDecoder(name, nil)
	d.Decode(root, reflect.ValueOf(spec).Elem(), "")
	if d.TooLarge() {
		return nil, nil, d.Problems()
	}
	return spec, d, nil
}

package rls

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestBooleansAsEnvoyproxyRatelimitReadsThem: a descriptor file's boolean
// fields take what gopkg.in/yaml.v2 (envoyproxy/ratelimit's YAML library)
// decodes into a Go bool: YAML 1.1's y, yes, on, n, no, off (lowercase,
// capitalised or uppercase) besides true and false, plain or tagged
// !!bool. What it refuses is refused here, at the field: 1 (a number), a
// quoted "true" (a string), t, and the mixed-case tRuE.
func TestBooleansAsEnvoyproxyRatelimitReadsThem(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"true", "True", "TRUE", "y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "!!bool yes", `!!bool "true"`} {
		src := "domain: d\ncompat: false\ndescriptors:\n  - key: flags\n    shadow_mode: " + v + "\n    detailed_metric: " + v +
			"\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: free\n    rate_limit: {unlimited: " + v + "}\n"
		cfg, err := Parse("cfg.yaml", []byte(src))
		if err != nil {
			t.Errorf("%s: %v", v, err)
			continue
		}
		root := cfg.domains["d"].root
		if f := root.anyValue["flags"]; !f.shadow || !f.detailed {
			t.Errorf("%s: shadow_mode %v, detailed_metric %v; want both true", v, f.shadow, f.detailed)
		}
		if f := root.anyValue["free"]; f.limit == nil || !f.limit.unlimited {
			t.Errorf("%s: unlimited not read as true: %+v", v, f.limit)
		}
	}
	for _, v := range []string{"false", "False", "FALSE", "n", "N", "no", "No", "NO", "off", "Off", "OFF"} {
		cfg, err := Parse("cfg.yaml", []byte("domain: d\ncompat: true\ndescriptors:\n  - key: k\n    shadow_mode: "+v+
			"\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"))
		if err != nil {
			t.Errorf("%s: %v", v, err)
			continue
		}
		if k := cfg.domains["d"].root.anyValue["k"]; k.shadow {
			t.Errorf("%s: shadow_mode read as true", v)
		}
	}
	for v, why := range map[string]string{
		"1":          `got "1"`,
		"0":          `got "0"`,
		"t":          `got "t"`,
		"tRuE":       `got "tRuE"`,
		"yEs":        `got "yEs"`,
		`"true"`:     `got the quoted string "true": a boolean is written without quotes`,
		`'yes'`:      `got the quoted string "yes": a boolean is written without quotes`,
		"!!str true": `got "true"`,
		"!!bool 1":   `got "1"`,
	} {
		for field, src := range map[string]string{
			"cfg.yaml:4:18: descriptors[0].shadow_mode":          "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: " + v + "\n",
			"cfg.yaml:4:22: descriptors[0].detailed_metric":      "domain: d\ndescriptors:\n  - key: k\n    detailed_metric: " + v + "\n",
			"cfg.yaml:4:29: descriptors[0].rate_limit.unlimited": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: " + v + "}\n",
			"cfg.yaml:2:9: compat":                               "domain: d\ncompat: " + v + "\n",
		} {
			_, err := Parse("cfg.yaml", []byte(src))
			want := field + ": want true or false (or yes, no, on, off, y, n), " + why
			if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s in %s: error %v, want %q", v, field, err, want)
			}
		}
	}
	// Metadata keeps its scalars' types: a boolean there is read as one,
	// and a scalar tagged !!bool that is no boolean is refused.
	cfg, err := Parse("cfg.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    metadata: {a: yes, b: \"yes\", c: 1, d: FALSE}\n"+
		"    rate_limit: {unit: minute, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	md := cfg.domains["d"].root.anyValue["k"].metadata.GetFields()
	if !md["a"].GetBoolValue() || md["b"].GetStringValue() != "yes" || md["c"].GetNumberValue() != 1 || md["d"].GetKind() == nil ||
		md["d"].GetBoolValue() {
		t.Errorf("metadata %v", md)
	}
	_, err = Parse("cfg.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    metadata: {a: !!bool 1}\n"))
	if want := `cfg.yaml:4:19: descriptors[0].metadata.a: want true or false`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("metadata !!bool 1: %v, want %q", err, want)
	}
}

// TestDocumentedBooleanProblems: the problems docs/envoy.md shows for a
// boolean are the ones a file gets.
func TestDocumentedBooleanProblems(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"1", `"true"`} {
		_, err := Parse("limits.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: "+v+"\n"))
		if err == nil {
			t.Fatalf("%s: accepted", v)
		}
		if !strings.Contains(string(doc), "\n"+err.Error()+"\n") {
			t.Errorf("docs/envoy.md does not show the problem of shadow_mode: %s:\n%s", v, err)
		}
	}
}

package rls

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/yamlfile"
)

// The files under testdata/envoy use every construct found in the
// configuration files of envoyproxy/ratelimit's repository (its examples
// and tests): the valid ones load there and here; each invalid one is
// refused there, and here with the position of the problem.

func TestEnvoyFormatValidFilesLoad(t *testing.T) {
	t.Parallel()
	cfg, err := Load([]string{"testdata/envoy/valid"}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Domains(), ","); got != "storefront,workshop" {
		t.Fatalf("domains %s", got)
	}
	if w := cfg.Warnings(); len(w) != 0 {
		t.Errorf("warnings for files without anything to warn about: %q", w)
	}
	// Spot checks that the constructs mean something.
	ws := cfg.domains["workshop"]
	n := ws.root.exact[entryKey{"plan", "gold"}]
	if n == nil || !n.limit.quotaMode || n.limit.metadata.GetFields()["plan_info"].GetStructValue().GetFields()["tier"].GetNumberValue() != 1 {
		t.Errorf("plan=gold: %+v", n)
	}
	if len(ws.root.wild["route"]) != 1 || !ws.root.wild["route"][0].matches("/v2/parts/7/bolts") ||
		ws.root.wild["route"][0].matches("/v2/parts/7/nuts") {
		t.Errorf("route wildcard: %+v", ws.root.wild["route"])
	}
	if f := ws.root.wild["file"]; len(f) != 3 || !f[0].shareThreshold || f[1].shareThreshold {
		t.Errorf("file wildcards: %+v", f)
	}
	if torch := ws.root.anyValue["bench"].children.exact[entryKey{"tool", "torch"}]; torch.limit.perUnit != 0 || torch.limit.rule != nil {
		t.Errorf("torch: %+v", torch.limit)
	}
	dump := cfg.Dump()
	for _, line := range []string{
		"storefront.region_eu: unit=SECOND requests_per_unit=200, shadow_mode: false, quota_mode: false\n",
		"workshop.plan_gold: unit=HOUR requests_per_unit=10, shadow_mode: false, quota_mode: true\n",
		"workshop.bench.apprentice: unit=MINUTE requests_per_unit=3, shadow_mode: true, quota_mode: false\n",
		"workshop.visitor: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n",
	} {
		if !strings.Contains(dump, line) {
			t.Errorf("dump lacks %q:\n%s", line, dump)
		}
	}
}

func TestEnvoyFormatMergedDomains(t *testing.T) {
	t.Parallel()
	_, err := Load([]string{"testdata/envoy/merge"}, LoadOptions{})
	want := `testdata/envoy/merge/part2.yaml:1:9: domain: domain "orchard" is already defined in testdata/envoy/merge/part1.yaml`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("two files of one domain without merging: %v, want %q", err, want)
	}
	cfg, err := Load([]string{"testdata/envoy/merge"}, LoadOptions{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	root := cfg.domains["orchard"].root
	if root.exact[entryKey{"tree", "apple"}] == nil || root.exact[entryKey{"tree", "pear"}] == nil {
		t.Fatalf("merged domain lacks a descriptor: %+v", root.exact)
	}
	// A descriptor given in two merged files is still an error, at its
	// place in the second file.
	dir := t.TempDir()
	part1, _ := os.ReadFile("testdata/envoy/merge/part1.yaml")
	for _, name := range []string{"a.yaml", "b.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, name), part1, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err = Load([]string{dir}, LoadOptions{MergeDomains: true})
	want = filepath.Join(dir, "b.yaml") + `:4:5: descriptors[0].value: descriptor tree=apple is defined twice at this level (also in ` + filepath.Join(dir, "a.yaml") + `)`
	if err == nil || err.Error() != want {
		t.Fatalf("a descriptor in two merged files: %v, want %q", err, want)
	}
}

func TestEnvoyFormatInvalidFilesAreRefusedWithAPosition(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"bad_unit.yaml":               `6:13: descriptors[0].rate_limit.unit: unknown unit "fortnight"`,
		"bad_yaml.yaml":               `3:1: YAML syntax`,
		"duplicate_descriptor.yaml":   `5:5: descriptors[1].value: descriptor k=v is defined twice at this level`,
		"missing_domain.yaml":         `1:1: domain: missing`,
		"empty_domain.yaml":           `1:9: domain: must not be empty`,
		"missing_key.yaml":            `3:5: descriptors[0].key: missing`,
		"misspelled.yaml":             `5:5: descriptors[0].rate_limits: unknown field (did you mean "rate_limit"?)`,
		"misspelled_nested.yaml":      `6:7: descriptors[0].rate_limit.request_per_unit: unknown field (did you mean "requests_per_unit"?)`,
		"list_of_scalars.yaml":        `3:5: descriptors[0]: want a mapping, got "one"`,
		"number_key.yaml":             `1:1: 1.5: unknown field`,
		"replaces_empty.yaml":         `7:16: descriptors[0].rate_limit.replaces[0].name: missing`,
		"replaces_self.yaml":          `7:17: descriptors[0].rate_limit.replaces[0].name: a limit cannot replace itself`,
		"unlimited_unit.yaml":         `6:13: descriptors[0].rate_limit.unlimited: an unlimited rate limit takes no unit`,
		"share_without_wildcard.yaml": `5:22: descriptors[0].share_threshold: share_threshold needs a wildcard value`,
		"composite_clash.yaml":        `5:5: descriptors[1].value: descriptors a=b_c and a_b=c are one descriptor to envoyproxy/ratelimit (both "a_b_c")`,
		"missing_unit.yaml":           `5:7: descriptors[0].rate_limit.unit: missing`,
		"negative_rpu.yaml":           `4:51: descriptors[0].rate_limit.requests_per_unit: -1 is out of range`,
		"fractional_rpu.yaml":         `4:51: descriptors[0].rate_limit.requests_per_unit: want a whole number, got "1.5"`,
		"metadata_list.yaml":          `4:15: descriptors[0].metadata: want a mapping, got a list`,
		"rate_limit_scalar.yaml":      `4:17: descriptors[0].rate_limit: want a mapping, got "5"`,
	}
	ents, err := os.ReadDir("testdata/envoy/invalid")
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(cases) {
		t.Errorf("%d files, %d cases", len(ents), len(cases))
	}
	for name, want := range cases {
		path := filepath.Join("testdata/envoy/invalid", name)
		_, err := Load([]string{path}, LoadOptions{})
		var errs yamlfile.Errors
		if !errors.Is(err, ErrConfig) || !errors.As(err, &errs) {
			t.Errorf("%s: %v, want an ErrConfig", name, err)
			continue
		}
		if !strings.Contains(err.Error(), path+":"+want) {
			t.Errorf("%s:\n%v\nwant it to contain\n%s", name, err, path+":"+want)
		}
		for _, e := range errs {
			if e.Line == 0 {
				t.Errorf("%s: a problem without a position: %v", name, e)
			}
		}
	}
	// Two files of one domain, without merging.
	_, err = Load([]string{"testdata/envoy/valid/basic.yaml", "testdata/envoy/valid/basic.yaml"}, LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), `basic.yaml:4:9: domain: domain "storefront" is already defined`) {
		t.Errorf("a domain defined twice: %v", err)
	}
}

// TestEnvoyFormatReadsWhatEnvoyproxyRatelimitReads: what its loader
// accepts and ignores is accepted here too, with a warning.
func TestEnvoyFormatReadsWhatEnvoyproxyRatelimitReads(t *testing.T) {
	t.Parallel()
	cfg, err := Parse("cfg.yaml", []byte(`domain: d
descriptors:
  - key: free
    unit: minute
    rate_limit: {unlimited: true, requests_per_unit: 5}
  - key: blocked
    rate_limit: {unit: minute}
  - key: flags
    shadow_mode: yes
    detailed_metric: On
    rate_limit: {unit: minute, requests_per_unit: 1, name: ""}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"cfg.yaml:4:5: descriptors[0].unit: ignored: this key has no meaning here (envoyproxy/ratelimit ignores it too)",
		"cfg.yaml:5:54: descriptors[0].rate_limit.requests_per_unit: ignored: the limit is unlimited",
		"cfg.yaml:7:17: descriptors[1].rate_limit: requests_per_unit is missing: it is 0, so every request is over the limit (as envoyproxy/ratelimit reads it)",
	}
	if got := cfg.Warnings(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	root := cfg.domains["d"].root
	if b := root.anyValue["blocked"].limit; b == nil || b.perUnit != 0 || b.rule != nil {
		t.Errorf("blocked: %+v", b)
	}
	if f := root.anyValue["flags"]; !f.shadow || !f.detailed || f.limit.name != "d.flags" {
		t.Errorf("YAML 1.1 booleans: %+v", f)
	}
}

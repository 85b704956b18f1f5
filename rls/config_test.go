package rls

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

func TestConfigErrorsNameFileLineAndField(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"no domain", "descriptors: []\n", "cfg.yaml:1:1: domain: missing"},
		{"unknown top key", "domain: d\ndescriptor: []\n", "cfg.yaml:2:1: descriptor: unknown field"},
		{"missing key", "domain: d\ndescriptors:\n  - value: v\n", "cfg.yaml:3:5: descriptors[0].key: missing"},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
			"cfg.yaml:5:13: descriptors[0].rate_limit.unit: unknown unit \"fortnight\""},
		{"negative rpu", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			"cfg.yaml:4:51: descriptors[0].rate_limit.requests_per_unit: -1 is out of range"},
		{"rpu not a number", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: many}\n",
			"descriptors[0].rate_limit.requests_per_unit: want a whole number"},
		{"missing unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 3\n",
			"cfg.yaml:5:7: descriptors[0].rate_limit.unit: missing"},
		{"unlimited with a unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: day}\n",
			"cfg.yaml:4:41: descriptors[0].rate_limit.unlimited: an unlimited rate limit takes no unit"},
		{"nested unknown", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        shadow: true\n",
			"cfg.yaml:6:9: descriptors[0].descriptors[0].shadow: unknown field"},
		{"duplicate", "domain: d\ndescriptors:\n  - key: a\n    value: x\n  - key: a\n    value: x\n",
			"cfg.yaml:5:5: descriptors[1].value: descriptor a=x is defined twice"},
		{"bad shadow", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: yes please\n",
			"descriptors[0].shadow_mode: want true or false"},
		{"bad algorithm", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: magic}\n",
			"descriptors[0].rate_limit.algorithm: floodgate: invalid limit: unknown algorithm \"magic\""},
		{"queue over rls", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky_queue}\n",
			"is not available over RLS"},
		{"burst on window", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 5}\n",
			"descriptors[0].rate_limit.burst: only token_bucket"},
		{"quota per hour", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: quota}\n",
			"a calendar quota needs unit day, week or month"},
		{"bad zone", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 1, quota: {time_zone: Mars/Olympus}}\n",
			"descriptors[0].rate_limit.quota.time_zone: unknown time zone"},
		// Each machine's own zone: instances sharing a Redis would cut
		// the periods of one quota at different midnights.
		{"local zone", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 1, quota: {time_zone: Local}}\n",
			"descriptors[0].rate_limit.quota.time_zone: unknown time zone \"Local\""},
		{"bad on_failure", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 1, on_failure: maybe}\n",
			"descriptors[0].rate_limit.on_failure: want allow, deny or local"},
		{"replaces without name", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 1, replaces: [{}]}\n",
			"descriptors[0].rate_limit.replaces[0].name: missing"},
		// The limit's own rules, at the field that gives the parameter.
		{"rate too fast", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967295, algorithm: gcra}\n",
			"cfg.yaml:4:51: descriptors[0].rate_limit.requests_per_unit: rate 4294967295 per 1s is faster than one unit a nanosecond"},
		{"anchor day of a daily quota", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 5, quota: {anchor_day: 3}}\n",
			"cfg.yaml:4:71: descriptors[0].rate_limit.quota.anchor_day: an anchor day needs a monthly period"},
		{"burst overflows", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: year, requests_per_unit: 1, algorithm: token_bucket, burst: 2147483647}\n",
			"cfg.yaml:4:84: descriptors[0].rate_limit.burst: burst 2147483647 at 1 per 8760h0m0s overflows"},
		{"not yaml", "domain: [\n", "cfg.yaml:1:1: YAML syntax (in the block starting here): did not find expected node content"},
	}
	for _, c := range cases {
		_, err := Parse("cfg.yaml", []byte(c.src))
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q, want it to contain %q", c.name, err, c.want)
		}
	}
}

func TestLoadDirectoryWithSeveralDomains(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: alpha\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	write("b.yml", "domain: beta\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 7}\n")
	write("notes.txt", "not a config")
	write(".hidden.yaml", "garbage: [")
	cfg, err := Load([]string{dir}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Domains(), ","); got != "alpha,beta" {
		t.Fatalf("domains %q", got)
	}
	// The same domain twice is an error naming both files.
	write("c.yaml", "domain: alpha\n")
	_, err = Load([]string{dir}, LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), "c.yaml") || !strings.Contains(err.Error(), "a.yaml") {
		t.Fatalf("duplicate domain: %v", err)
	}
	// A single file loads on its own.
	cfg, err = Load([]string{filepath.Join(dir, "b.yml")}, LoadOptions{})
	if err != nil || strings.Join(cfg.Domains(), ",") != "beta" {
		t.Fatalf("single file: %v %v", cfg, err)
	}
	if _, err := Load([]string{filepath.Join(dir, "missing.yaml")}, LoadOptions{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestExtensionsCompileToFloodgateLimits(t *testing.T) {
	cfg := mustParse(t, `
domain: ext
descriptors:
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20, on_failure: deny}
  - key: month
    rate_limit: {unit: month, requests_per_unit: 1000, quota: {time_zone: Europe/Paris, anchor_day: 15}}
  - key: week
    rate_limit: {unit: week, requests_per_unit: 50}
  - key: year
    rate_limit: {unit: year, requests_per_unit: 5}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: sliding_window, name: smooth}
`)
	d := cfg.domains["ext"]
	get := func(k string) *rateLimit { return d.root.anyValue[k].limit }
	b := get("bucket")
	if l := b.rule.Limit(); l.Algorithm != floodgate.TokenBucket || l.Rate != 10 || l.Per != time.Second || l.Burst != 20 {
		t.Errorf("bucket: %+v", l)
	}
	if b.rule.OnFailure().String() != "deny" {
		t.Errorf("bucket on_failure %s", b.rule.OnFailure())
	}
	m := get("month").rule.Limit()
	if m.Algorithm != floodgate.Quota || m.Period != floodgate.Month || m.Max != 1000 || m.AnchorDay != 15 || m.Location.String() != "Europe/Paris" {
		t.Errorf("month: %+v", m)
	}
	if w := get("week").rule.Limit(); w.Algorithm != floodgate.Quota || w.Period != floodgate.Week || w.Location != nil {
		t.Errorf("week: %+v", w)
	}
	if y := get("year").rule.Limit(); y.Algorithm != floodgate.FixedWindow || y.Window != 365*24*time.Hour {
		t.Errorf("year: %+v", y)
	}
	s := get("sliding")
	if s.rule.Algorithm() != floodgate.SlidingWindow || s.name != "smooth" || s.rule.Name() != "smooth" {
		t.Errorf("sliding: %+v", s.rule.Limit())
	}
}

package rls

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/yamlfile"
)

// TestConfigReportsEveryProblemAtOnce: problems in several descriptors
// and several files come back together, sorted, one per line, each as
// file:line:col: field: message, and the error is still an ErrConfig.
func TestConfigReportsEveryProblemAtOnce(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", `domain: alpha
descriptors:
  - key: user
    rate_limit: {unit: fortnight, requests_per_unit: 5}
  - key: api
    rate_limit: {unit: second, requests_per_unit: 5, brust: 9}
  - value: orphan
`)
	write("b.yaml", `domain: beta
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: -3}
`)
	write("c.yaml", "domain: alpha\n")
	_, err := Load([]string{dir}, LoadOptions{})
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("error %v is not an ErrConfig", err)
	}
	var errs yamlfile.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %T holds no Errors", err)
	}
	a, b, c := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml"), filepath.Join(dir, "c.yaml")
	want := []string{
		a + `:4:24: descriptors[0].rate_limit.unit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)`,
		a + `:6:54: descriptors[1].rate_limit.brust: unknown field (did you mean "burst"?)`,
		a + `:7:5: descriptors[2].key: missing`,
		b + `:4:51: descriptors[0].rate_limit.requests_per_unit: -3 is out of range [0, 4294967295]`,
		c + `:1:9: domain: domain "alpha" is already defined in ` + a + ` (merging the files of a domain is an option: MERGE_DOMAIN_CONFIG)`,
	}
	if got := err.Error(); got != strings.Join(want, "\n") {
		t.Errorf("problems\n got:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// TestConfigRefusesWhatTheDecoderRefuses: the descriptor files share the
// policy file's decoder, with its limits.
func TestConfigRefusesWhatTheDecoderRefuses(t *testing.T) {
	// Six hundred descriptors, each with the same six hundred children:
	// a small file naming 360,000 values.
	var bomb strings.Builder
	bomb.WriteString("domain: d\ndescriptors:\n  - key: k0\n    descriptors: &a [")
	for i := range 600 {
		if i > 0 {
			bomb.WriteString(", ")
		}
		fmt.Fprintf(&bomb, "{key: c%d}", i)
	}
	bomb.WriteString("]\n")
	for i := 1; i < 600; i++ {
		fmt.Fprintf(&bomb, "  - {key: k%d, descriptors: *a}\n", i)
	}
	cases := []struct{ name, src, want string }{
		{"merge key", "domain: d\ndescriptors:\n  - &base {key: a, value: x}\n  - <<: *base\n    value: y\n",
			"cfg.yaml:4:5: descriptors[1]: merge keys (<<) are not supported; write the fields out"},
		{"field twice", "domain: d\ndescriptors:\n  - key: a\n    key: b\n",
			"cfg.yaml:4:5: descriptors[0].key: field given twice"},
		{"did you mean", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algoritm: gcra}\n",
			`cfg.yaml:4:54: descriptors[0].rate_limit.algoritm: unknown field (did you mean "algorithm"?)`},
		{"two documents", "domain: d\n---\ndomain: e\n",
			"cfg.yaml:2:1: more than one YAML document; write one"},
		{"alias bomb", bomb.String(), "values once its aliases are expanded"},
	}
	for _, c := range cases {
		_, err := Parse("cfg.yaml", []byte(c.src))
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %.300v, want it to contain %q", c.name, err, c.want)
		}
	}
}

// TestLongValuesCutInProblems: a descriptor file whose values are of 300
// KB (a unit, a count, a boolean) is refused by problems naming the file,
// line and field that quote each value's first bytes and its length, not
// the whole value.
func TestLongValuesCutInProblems(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("x", 300_000)
	_, err := Parse("d.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: "+huge+", requests_per_unit: 5}\n"+
		"  - key: b\n    rate_limit: {unit: second, requests_per_unit: "+huge+"}\n  - key: c\n    shadow_mode: "+huge+"\n"))
	msg := fmt.Sprint(err)
	for _, want := range []string{"d.yaml:4:", "descriptors[0].rate_limit.unit", "d.yaml:6:", "descriptors[1].rate_limit.requests_per_unit", "d.yaml:8:", "descriptors[2].shadow_mode", "… (300000 bytes)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("no %q in the problems (%d bytes): %.600s", want, len(msg), msg)
		}
	}
	if len(msg) > 4<<10 {
		t.Errorf("the problems of three values of 300 KB: %d bytes", len(msg))
	}
}

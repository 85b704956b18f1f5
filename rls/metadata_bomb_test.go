package rls

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestMetadataAliasBombIsBounded: a descriptor's metadata of aliases that
// name ten million strings in 500 bytes is refused, as the policy file's
// alias bombs are: its values count against the values a file may have.
// It took 1.2 GB and was reported valid; one level more took 12 GB.
func TestMetadataAliasBombIsBounded(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bomb.yaml")
	src := `domain: bomb
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 3}
    metadata:
      a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]
      a1: &a1 [*a0,*a0,*a0,*a0,*a0,*a0,*a0,*a0,*a0,*a0]
      a2: &a2 [*a1,*a1,*a1,*a1,*a1,*a1,*a1,*a1,*a1,*a1]
      a3: &a3 [*a2,*a2,*a2,*a2,*a2,*a2,*a2,*a2,*a2,*a2]
      a4: &a4 [*a3,*a3,*a3,*a3,*a3,*a3,*a3,*a3,*a3,*a3]
      a5: &a5 [*a4,*a4,*a4,*a4,*a4,*a4,*a4,*a4,*a4,*a4]
      a6: &a6 [*a5,*a5,*a5,*a5,*a5,*a5,*a5,*a5,*a5,*a5]
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := Load([]string{dir}, LoadOptions{}); done <- err }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("loading did not finish")
	}
	want := regexp.MustCompile(`^` + regexp.QuoteMeta(path) + `:\d+:\d+: descriptors\[0\]\.metadata\.a\d(\[\d\])*: ` +
		`the file has more than 262144 values once its aliases are expanded$`)
	if err == nil || !want.MatchString(err.Error()) {
		t.Fatalf("got %.500v\nwant %s", err, want)
	}
}

// TestMetadataAliasesWithinBoundLoad: metadata that uses aliases within
// the bound still loads, each alias expanded.
func TestMetadataAliasesWithinBoundLoad(t *testing.T) {
	cfg, err := Parse("m.yaml", []byte(`domain: d
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 3}
    metadata:
      a: &a {n: 1, l: [x, z]}
      b: [*a, *a]
`))
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.domains["d"].root.anyValue["client"]
	if n == nil {
		t.Fatal("no descriptor client")
	}
	b := n.limit.metadata.GetFields()["b"].GetListValue().GetValues()
	if len(b) != 2 || b[1].GetStructValue().GetFields()["l"].GetListValue().GetValues()[1].GetStringValue() != "z" {
		t.Errorf("metadata b: %v", b)
	}
}

package yamlfile

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// parsedNodes is the number of nodes the parser builds for src as Read
// parses it (the first two documents), or -1 when it refuses src.
func parsedNodes(src []byte) int {
	var walk func(n *yaml.Node) int
	walk = func(n *yaml.Node) int {
		c := 1
		if n.Kind != yaml.AliasNode {
			for _, k := range n.Content {
				c += walk(k)
			}
		}
		return c
	}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	total := 0
	for range 2 {
		var doc yaml.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return -1
		}
		total += walk(&doc)
	}
	return total
}

// TestTreeNodesIsAnUpperBound checks that the count before parsing never
// counts fewer nodes than the parser builds: on the shapes that make the
// most nodes of the fewest bytes, on the repository's YAML files, and on
// random YAML made of indicators, scalars, quotes, comments and breaks.
func TestTreeNodesIsAnUpperBound(t *testing.T) {
	check := func(src string) {
		t.Helper()
		want := parsedNodes([]byte(src))
		if got, _ := treeNodes([]byte(src), 1<<62); got < want {
			t.Errorf("%q: counted %d nodes, the parser builds %d", src, got, want)
		}
	}
	for _, src := range []string{
		"", "a", "a: b\nc: d\n", "a:\n  b:\n", ": b\n", ":\n", "?\n", "? a\n: b\n", "-\n-\n", "- - -\n",
		"{a, b, c}", "{a}", "{,}", "{:}", "[:]", "[: b]", "[a: ]", "[? ]", "[?]", "{? a}", "[a: b, c: d]",
		"[{a}]", "{[a], [b]}", "{[], [], []}", "{&a, &b}", "[&a, &b]", "- &a\n- !t\n", "a: &x\nb: *x\n",
		"{*a}", "[a, {b, c}]", "\"a\": b", "{\"a\":b}", "[\"a\":b]", "['a':]", "a: 1\n---\nb: 2\n",
		"---\n---\n---\n", "a\n...\nb\n...\nc\n", "- a # c, d: e\n- b\n", "[a, # x\n b, c]",
		"[\"# \", a, a, a]", "['# ', a, a, a]", "k: |\n  - a\n  - b\n", "k: >-\n  a: b\n", "!t [a, b]",
		"&a [a, &b b, *a]", "- ? a\n  : b\n", "[a,b,c,d,e,f]", "{a: [b, {c: d}], e}", "\xef\xbb\xbfa: b\n",
		"\xff\xfe[\x00a\x00,\x00b\x00]\x00", "\xfe\xff\x00{\x00a\x00,\x00b\x00}", "a:\r\n- b\r\n- c\r\n",
		"[a,\xc2\x85b]", "[a\tb, c]", "a: b\tc\n", "- a: b\n  c: d\n- e: f\n",
	} {
		check(src)
	}
	files, _ := filepath.Glob("../../*/testdata/*.yaml")
	more, _ := filepath.Glob("../../examples/*.yaml")
	for _, f := range append(files, more...) {
		if b, err := os.ReadFile(f); err == nil {
			check(string(b))
		}
	}
	pieces := []string{"a", "bc", "-", "- ", " ", "  ", "\n", "\n  ", ":", ": ", ",", ", ", "[", "]", "{", "}",
		"?", "? ", "&x ", "*x", "!t ", "\"", "'", "\"q, r: s\"", "'s: t'", "# c, d: e", " #", "|", ">", "---",
		"...", "\t", "\\", "%", "\r\n", "x: ", "- y", "\xc2\x85"}
	r := rand.New(rand.NewPCG(1, 2))
	parsed := 0
	for range 40000 {
		var b strings.Builder
		for range 1 + r.IntN(24) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		if parsedNodes([]byte(b.String())) > 0 {
			parsed++
		}
		check(b.String())
	}
	if parsed < 1000 {
		t.Errorf("only %d random files parse: the test says little", parsed)
	}
}

// TestLargeFilesAreRefusedBeforeParsing: a file of a few bytes a node,
// just under MaxFileSize, is refused before the parser builds its tree:
// reading and refusing it allocates a small multiple of its size, where
// parsing it built eight million nodes (about 2 GB).
func TestLargeFilesAreRefusedBeforeParsing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	var b bytes.Buffer
	b.WriteString("version: 1\nx: [")
	for b.Len() < MaxFileSize-4 {
		b.WriteString("a,")
	}
	b.WriteString("a]\n")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	b = bytes.Buffer{}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	data, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	root, errs := Read(path, data)
	runtime.ReadMemStats(&after)
	if root != nil || len(errs) != 1 || !strings.Contains(errs.Error(), path+":2:1: too many YAML nodes") ||
		!strings.Contains(errs.Error(), "more than 1048576") {
		t.Fatalf("got %v, want too many YAML nodes at line 2", errs)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 200<<20 {
		t.Errorf("reading and refusing a %d-byte file allocated %d MB, want under 200 MB", len(data), alloc>>20)
	}
}

// TestFilesUpToMaxTreeNodesParse: a file of MaxNodes values written as a
// list of flow mappings, a dense shape for the count, passes it.
func TestFilesUpToMaxTreeNodesParse(t *testing.T) {
	var b strings.Builder
	b.WriteString("# a long list of limits\nlimits:\n")
	for i := range MaxNodes / 3 { // the entry, name and rate: three values
		b.WriteString("  - {name: l")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(", rate: 10}  # one, and: another\n")
	}
	root, errs := Read("f.yaml", []byte(b.String()))
	if errs != nil || root == nil {
		t.Fatalf("refused: %v", errs)
	}
}

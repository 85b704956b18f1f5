package docs_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestLedger holds docs/promises.md to the suite: every test a row names
// exists in the package it names, as a test function of the right kind,
// and runs in CI (go test ./... on Linux, without -short): neither it nor
// a package-level function its body refers to calls Skip, Skipf or SkipNow
// where CI would reach the call, and its file builds on Linux.
func TestLedger(t *testing.T) {
	t.Parallel()
	ledger, err := os.ReadFile("promises.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range checkLedger("..", "docs/promises.md", ledger) {
		t.Error(p)
	}
}

// TestLedgerChecks runs the checks of TestLedger on small ledgers against
// a package made for the purpose, so that each check is seen to fail on
// what it is there to catch.
func TestLedgerChecks(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "go.mod"), "module example.com/m\n\ngo 1.22\n")
	writeFile(t, filepath.Join(root, "fake", "fake_test.go"), `package fake

import (
	"os"
	"runtime"
	"testing"
)

func TestPresent(t *testing.T) {}

func TestSkipped(t *testing.T) { t.Skip("not today") }

func TestSkippedInALoop(t *testing.T) {
	for range 3 {
		if true {
			t.SkipNow()
		}
	}
}

func TestShortSkip(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
}

func TestShortElseSkips(t *testing.T) {
	if testing.Short() {
		return
	} else {
		t.Skip("always in CI")
	}
}

func TestNotLinuxSkip(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
}

func TestCIGuardedSkip(t *testing.T) {
	if _, err := os.Stat("/nonexistent-tool"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("the tool is missing")
		}
		t.Skip("the tool is missing")
	}
}

func TestViaHelper(t *testing.T) { forEach(t, testViaHelper) }

func forEach(t *testing.T, f func(t *testing.T, n int)) {
	for n := range 2 {
		t.Run("x", func(t *testing.T) { f(t, n) })
	}
}

func testViaHelper(t *testing.T, n int) { t.Skipf("helper %d", n) }

func TestShortGuardedHelper(t *testing.T) {
	if testing.Short() {
		skipper(t)
	}
}

func skipper(t *testing.T) { t.Skip("short") }

func TestWrongSignature(b *testing.B) {}

func Testing(t *testing.T) {}

func BenchmarkPresent(b *testing.B) {}

func FuzzPresent(f *testing.F) {}
`)
	writeFile(t, filepath.Join(root, "fake", "off_test.go"), "//go:build !linux\n\npackage fake\n\nimport \"testing\"\n\nfunc TestOffLinux(t *testing.T) {}\n")
	writeFile(t, filepath.Join(root, "fake", "fake_windows_test.go"), "package fake\n\nimport \"testing\"\n\nfunc TestWindowsOnly(t *testing.T) {}\n")

	const head = "# Promises\n\n## Area\n\n| promise | attack | tests | where |\n|---|---|---|---|\n"
	row := func(promise, tests, where string) string {
		return "| " + promise + " | an attack | " + tests + " | " + where + " |\n"
	}
	for _, c := range []struct {
		name   string
		ledger string
		want   []string // a problem containing each; none when empty
	}{
		{"present", head + row("holds", "`fake`: `TestPresent`", "memory"), nil},
		{"several packages and names", head + row("holds", "`fake`: `TestPresent`, `TestShortSkip`; `fake`: `TestNotLinuxSkip`", "memory"), nil},
		{"missing test", head + row("holds", "`fake`: `TestPresent`, `TestAbsent`", "memory"), []string{"TestAbsent: no such test"}},
		{"missing package", head + row("holds", "`nowhere`: `TestPresent`", "memory"), []string{"nowhere"}},
		{"skipped test", head + row("holds", "`fake`: `TestSkipped`", "memory"), []string{"TestSkipped: calls Skip"}},
		{"skip in a nested block", head + row("holds", "`fake`: `TestSkippedInALoop`", "memory"), []string{"TestSkippedInALoop: calls SkipNow"}},
		{"short-guarded skip allowed", head + row("holds", "`fake`: `TestShortSkip`", "memory"), nil},
		{"else of a short guard", head + row("holds", "`fake`: `TestShortElseSkips`", "memory"), []string{"TestShortElseSkips: calls Skip"}},
		{"skip off Linux allowed", head + row("holds", "`fake`: `TestNotLinuxSkip`", "memory"), nil},
		{"skip after a CI failure allowed", head + row("holds", "`fake`: `TestCIGuardedSkip`", "memory"), nil},
		{"skip one level down", head + row("holds", "`fake`: `TestViaHelper`", "memory"), []string{"TestViaHelper: calls Skipf (in testViaHelper"}},
		{"short-guarded helper allowed", head + row("holds", "`fake`: `TestShortGuardedHelper`", "memory"), nil},
		{"excluded on Linux", head + row("holds", "`fake`: `TestOffLinux`", "memory"), []string{"TestOffLinux: off_test.go does not build on linux"}},
		{"excluded by its name", head + row("holds", "`fake`: `TestWindowsOnly`", "memory"), []string{"TestWindowsOnly: fake_windows_test.go does not build on linux"}},
		{"wrong signature", head + row("holds", "`fake`: `TestWrongSignature`", "memory"), []string{"TestWrongSignature: no such test"}},
		{"not a test name", head + row("holds", "`fake`: `Testing`", "memory"), []string{"Testing"}},
		{"benchmark run by hand", head + row("holds", "`fake`: `TestPresent`, `BenchmarkPresent`, `FuzzPresent`", "memory; the benchmark and fuzzing by hand"), nil},
		{"benchmark not by hand", head + row("holds", "`fake`: `BenchmarkPresent`", "memory"), []string{"BenchmarkPresent", "by hand"}},
		{"no rows", head, []string{"no rows"}},
		{"no table", "# Promises\n\nNothing here.\n", []string{"no rows"}},
		{"unparsable tests cell", head + row("holds", "fake: TestPresent", "memory"), []string{"tests cell"}},
		{"names without a package", head + row("holds", "`TestPresent`", "memory"), []string{"tests cell"}},
		{"empty cell", head + "| holds | an attack | `fake`: `TestPresent` |  |\n", []string{"empty"}},
		{"wrong column count", head + "| holds | an attack | `fake`: `TestPresent` |\n", []string{"4 cells"}},
		{"wrong header", "## Area\n\n| promise | tests | where |\n|---|---|---|\n| holds | `fake`: `TestPresent` | memory |\n", []string{"header"}},
		{"none yet without a gap", head + row("is untested", "none yet", "—"), []string{`"is untested"`, "gaps"}},
		{"none yet with a gap", head + row("is untested", "none yet", "—") + "\n## Gaps\n\n- **is untested**: a test would attack it so.\n", nil},
		{"gap listed elsewhere", head + row("is untested", "none yet", "—") + "\n## Gaps\n\n## Other\n\n- is untested\n", []string{`"is untested"`}},
		{"duplicate promise", head + row("holds", "`fake`: `TestPresent`", "memory") + row("holds", "`fake`: `TestShortSkip`", "memory"), []string{"twice"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := checkLedger(root, "promises.md", []byte(c.ledger))
			if len(c.want) == 0 {
				if len(got) != 0 {
					t.Errorf("problems on a good ledger:\n%s", strings.Join(got, "\n"))
				}
				return
			}
			all := strings.Join(got, "\n")
			for _, w := range c.want {
				if !strings.Contains(all, w) {
					t.Errorf("want a problem saying %q, got:\n%s", w, all)
				}
			}
		})
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ledgerHeader is the header of every table of the ledger.
var ledgerHeader = []string{"promise", "attack", "tests", "where"}

// row is one promise of the ledger.
type row struct {
	line                  int
	promise, tests, where string
}

// checkLedger parses a ledger (name is how problems refer to it) and checks
// every test it names against the packages under root, the module's
// directory. It returns the problems found, one per string.
func checkLedger(root, name string, ledger []byte) []string {
	var problems []string
	report := func(line int, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s:%d: %s", name, line, fmt.Sprintf(format, args...)))
	}
	rows, gaps := parseLedger(ledger, report)
	if len(rows) == 0 {
		report(1, "no rows: want tables with the header | %s |", strings.Join(ledgerHeader, " | "))
		return problems
	}
	pkgs := map[string]*testPackage{}
	seen := map[string]int{}
	for _, r := range rows {
		if at, ok := seen[r.promise]; ok {
			report(r.line, "the promise %q is in the ledger twice (first at line %d)", r.promise, at)
		}
		seen[r.promise] = r.line
		if r.tests == "none yet" {
			if !anyContains(gaps, r.promise) {
				report(r.line, "the promise %q has no test and no entry in the gaps list (## Gaps)", r.promise)
			}
			continue
		}
		groups, err := parseTests(r.tests)
		if err != nil {
			report(r.line, "tests cell %q: %v", r.tests, err)
			continue
		}
		for _, g := range groups {
			p, ok := pkgs[g.pkg]
			if !ok {
				p = loadTestPackage(filepath.Join(root, filepath.FromSlash(g.pkg)))
				pkgs[g.pkg] = p
			}
			if p.err != nil {
				report(r.line, "package %s: %v", g.pkg, p.err)
				continue
			}
			for _, n := range g.names {
				if !strings.HasPrefix(n, "Test") && !strings.Contains(r.where, "by hand") {
					report(r.line, "%s is run by hand only: the where cell must say so (\"by hand\")", n)
				}
				for _, msg := range p.check(n) {
					report(r.line, "%s: %s: %s", g.pkg, n, msg)
				}
			}
		}
	}
	return problems
}

// parseLedger returns the rows of every ledger table and the items of the
// gaps list (the list items under a heading "Gaps"), reporting what it
// cannot read.
func parseLedger(ledger []byte, report func(line int, format string, args ...any)) (rows []row, gaps []string) {
	sc := bufio.NewScanner(bytes.NewReader(ledger))
	sc.Buffer(nil, 1<<20)
	var (
		n        int
		inTable  bool // after a ledger header and its separator
		header   bool // the line before was a ledger header
		inGaps   bool
		otherTbl bool // inside a table that is not the ledger's
	)
	for sc.Scan() {
		n++
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") {
			inGaps = strings.EqualFold(strings.TrimSpace(strings.TrimLeft(line, "#")), "gaps")
			inTable, header, otherTbl = false, false, false
			continue
		}
		if !strings.HasPrefix(line, "|") {
			inTable, header, otherTbl = false, false, false
			switch {
			case !inGaps || line == "":
			case strings.HasPrefix(line, "- ") || strings.HasPrefix(line, "* "):
				gaps = append(gaps, normalSpace(line[2:]))
			case len(gaps) > 0 && raw != line: // an item's indented continuation
				gaps[len(gaps)-1] += " " + normalSpace(line)
			}
			continue
		}
		cells := splitRow(line)
		switch {
		case header:
			header = false
			if !isSeparator(cells) {
				report(n, "the line after a ledger header must be its separator (|---|---|---|---|)")
				continue
			}
			inTable = true
		case inTable:
			if len(cells) != len(ledgerHeader) {
				report(n, "a row has %d cells, want 4 cells (%s)", len(cells), strings.Join(ledgerHeader, ", "))
				continue
			}
			r := row{line: n, promise: normalSpace(cells[0]), tests: normalSpace(cells[2]), where: normalSpace(cells[3])}
			bad := false
			for i, c := range cells {
				if strings.TrimSpace(c) == "" {
					report(n, "the %s cell is empty", ledgerHeader[i])
					bad = true
				}
			}
			if !bad {
				rows = append(rows, r)
			}
		case otherTbl:
		case isLedgerHeader(cells):
			header = true
		default:
			if len(cells) > 0 && strings.EqualFold(strings.TrimSpace(cells[0]), "promise") {
				report(n, "a ledger table's header must be | %s |", strings.Join(ledgerHeader, " | "))
			}
			otherTbl = true
		}
	}
	if err := sc.Err(); err != nil {
		report(n, "reading: %v", err)
	}
	return rows, gaps
}

// splitRow splits a table row into its cells, at every pipe that is not
// escaped (\|), as GitHub's tables do.
func splitRow(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	if strings.HasSuffix(line, "|") && !strings.HasSuffix(line, `\|`) {
		line = line[:len(line)-1]
	}
	var cells []string
	var b strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			b.WriteByte('|')
			i++
		case line[i] == '|':
			cells = append(cells, b.String())
			b.Reset()
		default:
			b.WriteByte(line[i])
		}
	}
	return append(cells, b.String())
}

func isLedgerHeader(cells []string) bool {
	if len(cells) != len(ledgerHeader) {
		return false
	}
	for i, c := range cells {
		if strings.ToLower(strings.TrimSpace(c)) != ledgerHeader[i] {
			return false
		}
	}
	return true
}

var separatorCell = regexp.MustCompile(`^\s*:?-{3,}:?\s*$`)

func isSeparator(cells []string) bool {
	if len(cells) != len(ledgerHeader) {
		return false
	}
	for _, c := range cells {
		if !separatorCell.MatchString(c) {
			return false
		}
	}
	return true
}

func normalSpace(s string) string { return strings.Join(strings.Fields(s), " ") }

func anyContains(items []string, s string) bool {
	for _, it := range items {
		if strings.Contains(it, s) {
			return true
		}
	}
	return false
}

// testGroup is one package of a tests cell and the tests named in it.
type testGroup struct {
	pkg   string
	names []string
}

var (
	// testsGroup is one group of a tests cell: `pkg`: `TestA`, `TestB`.
	testsGroup = regexp.MustCompile("^`([^`]+)`: (`[^`]+`(?:, `[^`]+`)*)$")
	// pkgPath is a package's directory relative to the module: "." or
	// slash-separated names.
	pkgPath = regexp.MustCompile(`^(?:\.|[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.-]*)*)$`)
)

// parseTests reads a tests cell: groups separated by "; ", each a package
// path in backquotes, a colon, and backquoted test names separated by ", ".
func parseTests(cell string) ([]testGroup, error) {
	var groups []testGroup
	for _, part := range strings.Split(cell, ";") {
		part = strings.TrimSpace(part)
		m := testsGroup.FindStringSubmatch(part)
		if m == nil {
			return nil, fmt.Errorf("%q is not `pkg`: `TestName`, `TestName2`", part)
		}
		pkg := m[1]
		if !pkgPath.MatchString(pkg) || pkg != "." && (strings.Contains("/"+pkg+"/", "/../") || strings.Contains("/"+pkg+"/", "/./")) {
			return nil, fmt.Errorf("%q is not a package path relative to the module", pkg)
		}
		g := testGroup{pkg: pkg}
		for _, n := range strings.Split(m[2], ", ") {
			n = strings.Trim(n, "`")
			if !isTestName(n) {
				return nil, fmt.Errorf("%q is not the name of a test, benchmark or fuzz target", n)
			}
			g.names = append(g.names, n)
		}
		groups = append(groups, g)
	}
	return groups, nil
}

// testKinds are the prefixes of what go test runs, with the type of their
// parameter.
var testKinds = []struct{ prefix, param string }{{"Test", "T"}, {"Benchmark", "B"}, {"Fuzz", "F"}}

// isTestName says whether go test takes name for a test, benchmark or fuzz
// target: the prefix, then nothing or a character that is not a lower-case
// letter.
func isTestName(name string) bool {
	return kindOf(name) != ""
}

// kindOf returns the parameter type ("T", "B", "F") of the test function
// name, or "" when go test would not run it.
func kindOf(name string) string {
	for _, k := range testKinds {
		rest, ok := strings.CutPrefix(name, k.prefix)
		if !ok {
			continue
		}
		if rest == "" {
			return k.param
		}
		r, _ := utf8.DecodeRuneInString(rest)
		if unicode.IsLower(r) {
			return ""
		}
		for _, c := range rest {
			if c != '_' && !unicode.IsLetter(c) && !unicode.IsDigit(c) {
				return ""
			}
		}
		return k.param
	}
	return ""
}

// testPackage is what the ledger needs of one package directory: its test
// files' package-level functions.
type testPackage struct {
	dir   string
	err   error
	funcs map[string][]*testFunc // by name; a test package and its package may both declare one
}

// testFunc is a package-level function of a _test.go file.
type testFunc struct {
	decl  *ast.FuncDecl
	file  string // base name
	linux bool   // the file builds on linux
	fset  *token.FileSet
	// testingAs is the name the file imports package testing under.
	testingAs string
}

// linuxContext is go/build's view of CI: Linux, this machine's
// architecture, no extra tags.
var linuxContext = func() build.Context {
	c := build.Default
	c.GOOS = "linux"
	c.BuildTags = nil
	return c
}()

// loadTestPackage parses the _test.go files of dir, and only those.
func loadTestPackage(dir string) *testPackage {
	p := &testPackage{dir: dir, funcs: map[string][]*testFunc{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		p.err = fmt.Errorf("no such package directory (%v)", err)
		return p
	}
	fset := token.NewFileSet()
	n := 0
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			p.err = fmt.Errorf("parsing %s: %w", e.Name(), err)
			return p
		}
		ok, err := linuxContext.MatchFile(dir, e.Name())
		if err != nil {
			p.err = fmt.Errorf("build constraints of %s: %w", e.Name(), err)
			return p
		}
		n++
		as := testingName(f)
		for _, d := range f.Decls {
			fd, isFunc := d.(*ast.FuncDecl)
			if !isFunc || fd.Recv != nil || fd.Body == nil {
				continue
			}
			p.funcs[fd.Name.Name] = append(p.funcs[fd.Name.Name], &testFunc{decl: fd, file: e.Name(), linux: ok, fset: fset, testingAs: as})
		}
	}
	if n == 0 {
		p.err = fmt.Errorf("no _test.go files in %s", dir)
	}
	return p
}

// testingName is the name file f imports package testing under, or "".
func testingName(f *ast.File) string {
	for _, im := range f.Imports {
		if path, _ := strconv.Unquote(im.Path.Value); path == "testing" {
			if im.Name != nil {
				return im.Name.Name
			}
			return "testing"
		}
	}
	return ""
}

// check returns what keeps the test name from running in CI: missing, of
// the wrong form, in a file that does not build on Linux, or skipped.
func (p *testPackage) check(name string) []string {
	kind := kindOf(name)
	var fn *testFunc
	for _, f := range p.funcs[name] {
		if isTestFunc(f, kind) {
			fn = f
			break
		}
	}
	if fn == nil {
		return []string{fmt.Sprintf("no such test: want func %s(%s *testing.%s) in a _test.go file of %s",
			name, strings.ToLower(kind), kind, p.dir)}
	}
	var problems []string
	if !fn.linux {
		problems = append(problems, fmt.Sprintf("%s does not build on linux (its build constraints or file name exclude it), so CI never runs it", fn.file))
	}
	for _, s := range skipsIn(fn.decl.Body, p.helpersOf(fn)) {
		problems = append(problems, s)
	}
	return problems
}

// isTestFunc says whether f is a function go test runs as kind: one
// parameter of type *testing.<kind>, no type parameters, no results.
func isTestFunc(f *testFunc, kind string) bool {
	t := f.decl.Type
	if kind == "" || t.TypeParams != nil || t.Results != nil || t.Params == nil || len(t.Params.List) != 1 || len(t.Params.List[0].Names) > 1 {
		return false
	}
	star, ok := t.Params.List[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && f.testingAs != "" && pkg.Name == f.testingAs && sel.Sel.Name == kind
}

// helpersOf returns the package-level functions of p that fn's body refers
// to outside the code CI never runs, each once.
func (p *testPackage) helpersOf(fn *testFunc) map[string][]*testFunc {
	out := map[string][]*testFunc{}
	for _, id := range walkSkips(fn.decl.Body).refs {
		if id == fn.decl.Name.Name {
			continue
		}
		if fs, ok := p.funcs[id]; ok {
			out[id] = fs
		}
	}
	return out
}

// skipsIn describes the Skip calls CI would reach in body and, one level
// deep, in the bodies of the helpers it refers to.
func skipsIn(body *ast.BlockStmt, helpers map[string][]*testFunc) []string {
	var out []string
	for _, s := range walkSkips(body).skips {
		out = append(out, fmt.Sprintf("calls %s, which CI reaches (only a skip under testing.Short(), os.Getenv(\"CI\") == \"\" or runtime.GOOS != \"linux\" is allowed)", s))
	}
	names := make([]string, 0, len(helpers))
	for n := range helpers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, h := range helpers[n] {
			for _, s := range walkSkips(h.decl.Body).skips {
				pos := h.fset.Position(h.decl.Pos())
				out = append(out, fmt.Sprintf("calls %s (in %s, %s:%d), which CI reaches", s, n, filepath.Base(pos.Filename), pos.Line))
			}
		}
	}
	return out
}

// walked is what walkSkips finds in code that CI runs: the Skip calls (by
// method name) and the identifiers referred to.
type walked struct {
	skips []string
	refs  []string
}

// walkSkips walks n, leaving out what CI never reaches: the body of an if
// whose condition is false in CI, and what follows, in its block, an if
// that fails the test when CI is set.
func walkSkips(n ast.Node) walked {
	var w walked
	seen := map[string]bool{}
	var walk func(n ast.Node)
	list := func(stmts []ast.Stmt) {
		for _, s := range stmts {
			walk(s)
			if failsInCI(s) {
				return
			}
		}
	}
	walk = func(n ast.Node) {
		if n == nil {
			return
		}
		ast.Inspect(n, func(x ast.Node) bool {
			switch x := x.(type) {
			case *ast.IfStmt:
				if x.Init != nil {
					walk(x.Init)
				}
				walk(x.Cond)
				if !falseInCI(x.Cond) {
					walk(x.Body)
				}
				if x.Else != nil {
					walk(x.Else)
				}
				return false
			case *ast.BlockStmt:
				list(x.List)
				return false
			case *ast.CaseClause:
				for _, e := range x.List {
					walk(e)
				}
				list(x.Body)
				return false
			case *ast.CommClause:
				if x.Comm != nil {
					walk(x.Comm)
				}
				list(x.Body)
				return false
			case *ast.SelectorExpr:
				walk(x.X) // x.Sel names a field or method, not a function of the package
				return false
			case *ast.CallExpr:
				if sel, ok := x.Fun.(*ast.SelectorExpr); ok {
					switch sel.Sel.Name {
					case "Skip", "Skipf", "SkipNow":
						w.skips = append(w.skips, sel.Sel.Name)
					}
				}
			case *ast.Ident:
				if !seen[x.Name] {
					seen[x.Name] = true
					w.refs = append(w.refs, x.Name)
				}
			}
			return true
		})
	}
	walk(n)
	return w
}

// falseInCI says whether cond is false whenever CI runs the suite (go test
// without -short, CI set, on Linux): testing.Short(), os.Getenv("CI") ==
// "", runtime.GOOS != "linux", or a conjunction holding one of them.
func falseInCI(cond ast.Expr) bool {
	cond = unparen(cond)
	if b, ok := cond.(*ast.BinaryExpr); ok {
		switch b.Op {
		case token.LAND:
			return falseInCI(b.X) || falseInCI(b.Y)
		case token.EQL:
			return isCall(b.X, "os", "Getenv", `"CI"`) && isString(b.Y, `""`) || isCall(b.Y, "os", "Getenv", `"CI"`) && isString(b.X, `""`)
		case token.NEQ:
			return isSelector(b.X, "runtime", "GOOS") && isString(b.Y, `"linux"`) || isSelector(b.Y, "runtime", "GOOS") && isString(b.X, `"linux"`)
		}
		return false
	}
	return isCall(cond, "testing", "Short", "")
}

// failsInCI says whether s is an if that fails the test whenever CI is set:
// if os.Getenv("CI") != "" { ... t.Fatal(...) }, with no else.
func failsInCI(s ast.Stmt) bool {
	is, ok := s.(*ast.IfStmt)
	if !ok || is.Init != nil || is.Else != nil {
		return false
	}
	b, ok := unparen(is.Cond).(*ast.BinaryExpr)
	if !ok || b.Op != token.NEQ || !(isCall(b.X, "os", "Getenv", `"CI"`) && isString(b.Y, `""`) || isCall(b.Y, "os", "Getenv", `"CI"`) && isString(b.X, `""`)) {
		return false
	}
	for _, st := range is.Body.List {
		if es, ok := st.(*ast.ExprStmt); ok {
			if c, ok := es.X.(*ast.CallExpr); ok {
				if sel, ok := c.Fun.(*ast.SelectorExpr); ok {
					switch sel.Sel.Name {
					case "Fatal", "Fatalf", "FailNow":
						return true
					}
				}
			}
		}
	}
	return false
}

func unparen(e ast.Expr) ast.Expr {
	for {
		p, ok := e.(*ast.ParenExpr)
		if !ok {
			return e
		}
		e = p.X
	}
}

func isSelector(e ast.Expr, pkg, name string) bool {
	sel, ok := unparen(e).(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg && sel.Sel.Name == name
}

// isCall says whether e is pkg.name(arg), or pkg.name() when arg is "".
func isCall(e ast.Expr, pkg, name, arg string) bool {
	c, ok := unparen(e).(*ast.CallExpr)
	if !ok || !isSelector(c.Fun, pkg, name) {
		return false
	}
	if arg == "" {
		return len(c.Args) == 0
	}
	return len(c.Args) == 1 && isString(c.Args[0], arg)
}

func isString(e ast.Expr, lit string) bool {
	b, ok := unparen(e).(*ast.BasicLit)
	return ok && b.Kind == token.STRING && b.Value == lit
}

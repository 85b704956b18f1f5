package yamlfile

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// MaxErrors is the most problems reported for one file; a last item says
// how many more there were.
const MaxErrors = 200

// Pos is a position in a file: 1-based line and column. The zero Pos means
// the position is unknown.
type Pos struct {
	Line   int
	Column int
}

// Error is one problem found in a file.
type Error struct {
	// File is the file's name as given to the reader.
	File string
	// Line and Column locate the offending value (1-based; 0 if unknown).
	Line, Column int
	// Field is the path of the offending field, such as "limits[2].burst";
	// empty for problems with the whole document.
	Field string
	// Msg says what is wrong.
	Msg string
}

// Error formats the problem as "file:line:col: field: message". A field
// or message longer than maxField or maxMsg (a key or a value of the file
// quoted whole) is cut, with its length said.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(cut(e.Field, maxField))
		b.WriteString(": ")
	}
	b.WriteString(cut(e.Msg, maxMsg))
	return b.String()
}

// A problem's argument longer than maxArg (a value of the file, quoted) is
// shown by its first maxShown bytes (Decoder.ErrorAt); maxField and maxMsg
// bound a problem's field and message however they were made, so that a
// file of a value or a key of megabytes is never written back whole to a
// terminal or a log.
const (
	maxArg   = 1024
	maxShown = 128
	maxField = 512
	maxMsg   = 2048
)

// prefix returns s cut after n bytes (at a character's start) and
// whether it was cut.
func prefix(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}

// cut returns s cut after n bytes with its length said, when it is longer.
func cut(s string, n int) string {
	p, c := prefix(s, n)
	if !c {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", p, len(s))
}

// show is s as an argument of a problem's message: cut when it is longer
// than maxArg.
func show(s string) any {
	if len(s) > maxArg {
		return shownValue(s)
	}
	return s
}

// shownValue is a long string argument of a problem's message: formatted
// (%s, %q, %v) cut after maxShown bytes.
type shownValue string

// Format writes v cut after maxShown bytes, quoted for %q.
func (v shownValue) Format(f fmt.State, verb rune) {
	p, _ := prefix(string(v), maxShown)
	if verb == 'q' {
		fmt.Fprintf(f, "%q… (%d bytes)", p, len(v))
		return
	}
	fmt.Fprintf(f, "%s… (%d bytes)", p, len(v))
}

// shown replaces the strings and errors among args longer than maxArg by
// their cut form.
func shown(args []any) []any {
	var out []any
	for i, a := range args {
		var s string
		switch a := a.(type) {
		case string:
			s = a
		case error:
			s = a.Error()
		default:
			continue
		}
		if len(s) <= maxArg {
			continue
		}
		if out == nil {
			out = slices.Clone(args)
		}
		out[i] = shownValue(s)
	}
	if out == nil {
		return args
	}
	return out
}

// Errors is every problem found in one or more files, sorted by file and
// position.
type Errors []*Error

// Error formats one problem per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Sorted orders the problems by file, line, column and field, drops exact
// duplicates, and keeps at most MaxErrors of them, followed by an item that
// says how many more there were. It reorders es in place.
func (es Errors) Sorted() Errors {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Column != b.Column {
			return a.Column < b.Column
		}
		return a.Field < b.Field
	})
	out := es[:0]
	for _, e := range es {
		if len(out) > 0 && *e == *out[len(out)-1] {
			continue
		}
		out = append(out, e)
	}
	if len(out) > MaxErrors {
		more := len(out) - MaxErrors
		out = append(out[:MaxErrors:MaxErrors], &Error{File: out[MaxErrors].File, Msg: fmt.Sprintf("and %d more problems", more)})
	}
	return out
}

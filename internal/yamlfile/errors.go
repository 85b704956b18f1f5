package yamlfile

import (
	"fmt"
	"sort"
	"strings"
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

// Error formats the problem as "file:line:col: field: message".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
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

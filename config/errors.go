package config

import (
	"fmt"
	"sort"
	"strings"
)

// Pos is a position in a file: 1-based line and column. The zero Pos means
// the position is unknown.
type Pos struct {
	Line   int
	Column int
}

// Error is one problem found in a configuration file.
type Error struct {
	// File is the file's name as given to Load or Parse.
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

// Errors is every problem found in one file, sorted by position. Load and
// Parse return it (as an error) when the file is invalid.
type Errors []*Error

// Error formats one problem per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// sort orders the problems by line, column and field, and drops exact
// duplicates.
func (es Errors) sort() Errors {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i], es[j]
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
	return out
}

package config

import "github.com/floodgate/floodgate/internal/yamlfile"

// Pos is a position in a file: 1-based line and column. The zero Pos means
// the position is unknown.
type Pos = yamlfile.Pos

// Error is one problem found in a configuration file: its File, Line,
// Column, the path of the offending Field (such as "limits[2].burst"; empty
// for problems with the whole document) and a Msg saying what is wrong. It
// formats as "file:line:col: field: message". The descriptor files of
// package rls report their problems with the same type.
type Error = yamlfile.Error

// Errors is every problem found in one file, sorted by position, one per
// line when formatted. Load and Parse return it (as an error) when the file
// is invalid.
type Errors = yamlfile.Errors

// MaxFileSize is the largest configuration file Load and Parse accept.
const MaxFileSize = yamlfile.MaxFileSize

// MaxErrors is the most problems reported for one file; a last item says
// how many more there were.
const MaxErrors = yamlfile.MaxErrors

// Package config reads Floodgate's policy file: a YAML document with the
// server settings, the routes, the stages, the usage plans with their API
// keys, and the named limits.
//
// Load and Parse decode the file, apply defaults and validate everything at
// once: every problem is reported in an Errors value whose items carry the
// file, line, column and field path (limits[2].burst), formatted as
// "file:line:col: field: message". A File that Load returns without error
// is complete and consistent; package policy compiles it into the rules the
// engine checks.
//
// The format is documented in docs on the File type and its fields, in
// examples/school.yaml and in the JSON Schema schema/floodgate.schema.json.
package config

// Package schema holds the JSON Schema of Floodgate's policy file, for
// editors and for tools that check files without running floodgate check.
//
// The schema describes the shape of the file (fields, types, enumerations);
// floodgate check validates everything else (names that must exist, time
// zones, burst against cost).
package schema

import _ "embed"

// JSON is the schema, schema/floodgate.schema.json.
//
//go:embed floodgate.schema.json
var JSON []byte

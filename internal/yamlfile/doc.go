// Package yamlfile reads Floodgate's YAML files (the policy file of package
// config and the descriptor files of package rls) into plain Go structs,
// keeping the position of every value, and reports every problem of a file
// at once, each as "file:line:col: field: message".
//
// ReadFile reads one file without blocking on what is not a regular file
// (a named pipe, a device) and without reading more than MaxFileSize+1
// bytes. Read parses the bytes of one file into a YAML node tree, refusing
// files that are too large, that have more than MaxTreeNodes nodes as
// counted before parsing (the parser builds the whole tree first), that
// are empty or hold more than one document. A Decoder stores the tree into
// a struct by its yaml tags: unknown fields (with a "did you mean"
// suggestion), fields given twice, merge keys (<<) and wrong types are
// problems, and aliases are expanded up to MaxNodes values and
// MaxValueBytes bytes of scalars so that a few aliases cannot name a huge
// tree or copy a large scalar many times; values nested deeper than
// MaxDepth are refused. Hooks decode the types with a
// shape of their own. The Decoder remembers where each field path
// ("limits[2].burst") was written, so that the checks that follow decoding
// can report their problems at the right place with Errorf.
package yamlfile

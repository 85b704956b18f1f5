// Package floodgate holds the vocabulary shared by every part of Floodgate:
// limits, decisions and the errors a decision can end in.
//
// It has no dependencies beyond the standard library. The algorithms live in
// package algo, the engine that checks many limits at once in package limiter,
// and the stores in store/memstore and store/redisstore.
//
// # Adding a limit parameter
//
// A parameter of a limit touches eight places, two of them only when the
// Redis script needs it:
//
//  1. limit.go: its Param constant and its name in the files (paramNames);
//     every error about it and its position in a file follow from them.
//  2. limit.go: the parameter in the Params of its algorithms' rows of the
//     traits table.
//  3. limit.go: the Limit field and its rules in Problems, each naming
//     the Param (Describe and Capacity when they show or depend on it).
//  4. config/types.go: the field of Params, tagged with that name (and of
//     Quota, for a parameter of a plan's quota).
//  5. config/validate.go: paramsAt copies it into the floodgate.Limit
//     (one assignment, or a parse where the file writes it otherwise);
//     the rules are Problems', not restated.
//  6. algo: Compile reads it (params.go) and the algorithm decides with it.
//  7. store/redisstore/args.go: it is packed into the script's arguments.
//  8. store/redisstore/apply.lua (and refund.lua): the script reads it.
//
// Then go generate ./schema writes the JSON Schema from the structs
// (schema/gen/notes.go takes bounds and descriptions where the Go type
// says too little). A rule's ID fingerprints every field of Limit by
// reflection, so no list of fields is kept (limiter's
// TestRuleIDCoversEveryField fails if one is missed). Only when they are
// wanted: the flags of simulate and bench (internal/cli and
// internal/simulate), the Go library's guard.Limit, limiter/local.go for
// a count that a local share divides among instances, rls/config.go for
// a parameter envoyproxy/ratelimit's files can write, package fields for
// one that changes the RateLimit-Policy window, and config's doc.go.
package floodgate

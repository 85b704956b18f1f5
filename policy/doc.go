// Package policy is the compiled, immutable rule set of a configuration
// file: it matches a request to its route and to every limit that applies,
// most specific first (usage plan, then method and route limits, then the
// stage, then global and account limits), with the key each limit counts
// the request under. The engine (package limiter) then checks and charges
// them all at once. Routes and limits are indexed by their path patterns'
// segments (and limits without paths by the routes they name), so a match
// looks only at those the request's path and route may meet: its cost grows
// with the path's length and the number of such candidates, not with the
// number of routes and limits in the file, and it finds exactly what a scan
// of all of them in order finds.
//
// API keys come from the file and, through a KeySource (package keystore,
// keys managed through the admin API), from outside it: the file's keys are
// looked up first, the source only for a SHA-256 the file does not have.
//
// Explain says, for every limit in evaluation order, whether a request
// meets it and why not (route, method, host, path, stage, the API key and
// its plan, a key part missing), with the same hits as Match. A request
// may give its API key by name (Request.KeyName, as an access log shows
// it: Match.KeyID) instead of the raw key: it then meets the same limits
// under the same counters, which is how a log is replayed.
//
// A Policy is safe for concurrent use. Reloader swaps policies atomically
// when the file changes, keeping the rules (and so the counts) of limits
// that did not change. Reloader.Run looks at the file (and the JWT key
// file it names) every second and applies a change once it is whole: at
// the next look after its writer closed it or it was renamed into place
// (inotify, on Linux), else once two consecutive looks saw the same sizes,
// modification times and contents; a file being written is held back
// (package internal/watch says exactly what is guaranteed).
// Reloader.Reload, for SIGHUP, applies the file at once. Logs name each version applied or rejected by
// the first 12 hexadecimal digits of its SHA-256.
package policy

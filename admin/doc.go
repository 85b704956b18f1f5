// Package admin is the admin API of floodgate serve: JSON over HTTP on the
// admin listener, for the operator's console.
//
//   - API keys: create (the secret is shown once), list, get, revoke,
//     rotate with an overlap, assign a plan, per-key rate, burst and quota,
//     enable and disable, reset the counters;
//   - plans and limits with their compiled parameters (read only: the
//     policy file stays the source of truth for limits);
//   - usage per key and per limit (used, left, when it resets), read with
//     the engine's peek, which charges nothing;
//   - the audit log of every change: who, when, what.
//
// Every call needs "Authorization: Bearer TOKEN" with a token whose
// SHA-256 the policy file lists (server.admin.tokens); with none listed the
// API refuses every call. Tokens are compared by their digests in constant
// time. Keys of the policy file are listed (source "file") but changed only
// by editing the file; the file's keys take precedence over the API's
// (see package keystore).
//
// The reference, with curl examples, is docs/console.md.
package admin

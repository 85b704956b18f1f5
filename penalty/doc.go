// Package penalty is the gateway's penalty box: a key (a client address,
// an API key, a user) that offends too often within a window is banned for
// a while, and for longer each time it does so again.
//
// A Box holds the rules (config.Ban) and the bans. What is an offence is
// the caller's to say (the gateway counts a refusal by a limit whose key
// holds the identity the rule bans, never one by a limit its clients
// share, or the statuses a rule's count_on lists); Box.Offend counts one,
// and bans the key when it is the rule's After-th within Within: for Ban
// the first time, then Ban×Growth, Ban×Growth² ... up to MaxBan for a key
// banned again within MaxBan of its last ban's end.
//
// Checking a request (Box.Banned) never leaves the process: it looks the
// key up in the box's own view of the bans. With the memory backend that
// view is the bans themselves; with Redis (NewRedis) the offences are
// counted and the bans made by one script, atomically and on the server's
// clock, so that every instance sharing the Redis counts towards the same
// ban, and each instance reads the bans again whenever their version
// changes (it polls the version ten times a second): a ban made by one
// instance holds on all of them within the poll, and ends on all of them
// at the moment the server's clock set, however late each reads it. Both backends are
// bounded (MaxBans bans and counters) and forget a key's strikes MaxBan
// after its last ban ended, or sooner when the bans are full: a ban that
// has ended makes room for a new one, so that only bans in force fill the
// box.
package penalty

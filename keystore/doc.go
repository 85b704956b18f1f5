// Package keystore holds the API keys managed through the admin API, beside
// those of the policy file, and answers the policy's question "which key
// is this?" on the request path.
//
// A key is a Record: a name, a usage plan, its secrets (only their
// SHA-256), and what the operator changed (disabled, revoked, its own
// rate, burst or quota, resets of its counters). Records persist in a
// Backend: a JSON file next to the memory store's state file, or Redis
// when the store is Redis (FileBackend, RedisBackend).
//
// The request path reads an immutable snapshot, swapped atomically after
// every change: a map from SHA-256 to the key resolved against the current
// policy. A lookup is one atomic load and one map read; it allocates
// nothing unless the policy was reloaded since the snapshot was built
// (then the key is resolved on the spot and the snapshot rebuilt).
//
// Precedence: a key of the policy file wins. The store consults only
// hashes the file does not have (policy.KeySource), and refuses to create
// a key whose name the file uses. A key of the store whose name a reload
// gives to a key of the file is refused while the file has that name,
// since both would count under it.
//
// Changes: a Store makes one change at a time (a read of the backend, when
// it changed, then the write), and writes a record only if the backend's
// copy is still the one the change started from; when another instance
// changed it meanwhile, the Store reloads and makes the change again on the
// newer record. On Redis this compare-and-set is one script, so it holds
// across instances; on a file it holds within the process (the file is
// meant for one instance). A new key is written only while the backend
// holds fewer than server.admin.max_keys records, checked in the same
// step (Backend.Add), so instances adding keys at once cannot pass the
// bound together. A file that lists a name twice is refused.
//
// Propagation on Redis: every change writes the record to a hash,
// increments a version counter, logs the key's name under the new count
// in a sorted set of the last 1,000 changes, and publishes the version on
// a channel, all in one script. The version carries an epoch, set when
// the count is first needed and gone with the data, so that a Redis
// restarted empty and counted up again to the version an instance had
// read is still read again. An instance looks when a message arrives, and
// also polls the counter every 500 ms, so that a lost message (a
// reconnect) delays a new or revoked key by half a second at most. When
// the version moved, it reads only the records the log names since its
// own version (one script, HMGET), applies them (a record gone is
// removed) and resolves only those keys in a new snapshot; it reads every
// record (HGETALL) only at its start, when the epoch is another, when it
// is further behind than the log reaches, when the log misses a change
// (one made by an instance of an earlier version), or when the change
// that made its own version is not the one logged at that count (each
// change is tagged with the server's time, and the version carries the
// tag of the last: a failover that lost the last changes, the count then
// made again by other changes). So a change among
// 100,000 keys costs each instance a read of that key, not one of every
// key, which would hold a Redis shared with the rate limits for about
// 40 ms. The file backend polls the file's size and modification time at
// the same pace, and reads the whole file when they change.
package keystore

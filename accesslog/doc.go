// Package accesslog writes the gateway's access log: one line per request
// with what an operator needs to see, and to replay, its rate limiting:
// when it came (to the microsecond), the client address as resolved
// through trusted proxies, the method, host and path, the status, the body
// bytes and the duration, the API key by its name (never the key), the
// user, the route, the binding limit and the decision.
//
// Two formats: JSON lines (FormatJSON, the default) and NGINX's combined
// format followed by Floodgate's fields (FormatCombined, whose NGINX
// log_format is CombinedLogFormat), so that tools reading combined logs
// read it too.
//
// A Logger never makes a request wait on the disk: Log formats the record
// and appends it to a buffer in memory; a goroutine writes the buffer out
// every FlushInterval, or sooner when it fills. When the buffer is full
// (the disk is slower than the traffic) records are dropped and counted
// (Stats.Dropped), never queued without bound. A log file is rotated when
// it would grow past MaxSize: FILE becomes FILE.1, FILE.1 becomes FILE.2
// and so on, and the oldest beyond MaxFiles is removed.
package accesslog

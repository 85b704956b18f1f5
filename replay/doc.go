// Package replay answers "if this policy had been in force, who would have
// been refused?" before the policy ships: it reads access logs and decides
// every request through the policy on the embedded store, at the time the
// log gives (a virtual clock; nothing is slept), and reports what the
// policy would have done.
//
// # Logs
//
// Floodgate's own access log (package accesslog, JSON or combined), NGINX's
// combined and main formats or any log_format given as Options.LogFormat,
// Envoy's default format or any format string, and CSV with a header line
// naming its columns. The format is worked out from the first line unless
// Options.Format names it; gzipped logs are read as they are. A log's lines
// are written as requests end, so they are out of order by up to the
// longest request: a merger holds Options.Window of records and hands them
// out in order of arrival, across several logs (instances, or rotated
// files in any order), reading on from the log that is furthest behind.
// Memory follows the traffic's rate over the window and the policy's keys
// (idle counters are swept every minute of the log's time), not the log's
// length. A line longer than 1 MiB, a time before 1970 or from 2200 on,
// a time ahead of its log (a line the next line comes back from by more
// than the window, up to 8 in a row: a clock's error, which would stretch
// the report over the years between), and a duration below zero or above
// ten years make a line unreadable: counted, and shown with its line
// number. A replay ends with its
// context, also while it waits for a log that stalls (a pipe).
//
// # Requests
//
// A record is rebuilt into the request the gateway matched: client
// address, method, host, path, user, headers, and the API key. A log of
// Floodgate's gives the key by name ("partner-1", or "?" and a hash prefix
// for a key the policy did not know), which policy.Request.KeyName
// resolves against the policy being replayed and its key source (a
// policy.KeyNamer: floodgate replay attaches the console's key store, so
// keys made through the admin API are known): the key's plan in that
// policy applies, under the same counter as a request carrying the raw
// key; a log that holds the key itself (an NGINX $http_x_api_key, a CSV's
// api_key column) is hashed like a request's. Each request goes through
// the gateway's own admission flow (gateway.Gateway.Handle, with the
// identity the log gives as gateway.Known), so the replay does what the
// gateway does because it is the same code: a limit counted by outcome
// (count_on) holds a reservation while the request is in flight and keeps
// it for the statuses it counts, by the status the log shows, and
// concurrency leases are held until the request ends (its time plus its
// duration); a request the log shows 499 that a leaky queue would hold
// longer than its duration left the queue first, and gives its place
// back. Costs a request or a response tells are not in the log: a
// limit's default estimate stands for them.
//
// # Reports
//
// Run returns a Report: per limit, in evaluation order, the requests it
// applied to, allowed and denied, and when its denials started and
// stopped; the clients and keys refused most (a bounded space-saving
// count); a timeline per minute (coarser for long logs); and, when the log
// records decisions, how many the replay decided the same way and why the
// others differ (a refill or window boundary within the timestamps'
// resolution, two requests decided in the other order, or unexplained). At
// such a boundary the log cannot tell which side the live limit saw, and
// the replay charges the request as logged (see Replayer.Check), so that
// its counters stay equal to the live ones. With Options.Compare a second
// policy decides the same requests, held to the log the same way, and the
// report lists exactly those the two decide differently, grouped by
// direction, limit and client. WriteText,
// WriteHTML (one self-contained page, charts in inline SVG) and JSON
// render it.
//
// A replay has no upstream, so it has no upstream latency: it does not
// simulate a route's overload control (the cap, its tiers and its queue).
// Requests are decided by their limits alone, and the requests the log
// shows shed (its shed field) are shed as logged once their limits let
// them through (gateway.HandleOptions.Shed: a reservation and the plain
// charges given back, as the gateway gives them back), and counted and
// reported as logged (Agreement.Shed).
package replay

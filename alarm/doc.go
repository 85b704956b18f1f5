// Package alarm fires quota alarms: when an API key's use of its plan's
// quota reaches a threshold of the plan (80% and 100%, say), a log line, a
// metric and a webhook say so, once per key, threshold and quota period.
//
// Alarms is a limiter.Observer. On the request path it only compares a
// quota hit's use with its plan's thresholds; a hit past a threshold not
// seen yet in this process is queued (a bounded queue: when it is full the
// alarm is dropped and counted). A worker then claims the alarm through a
// Deduper (SET NX with a TTL to the period's end on Redis, so that one
// instance of a deployment fires it; a map in this process otherwise) and
// delivers it.
//
// The webhook is a POST of a JSON body (Event) with
//
//	X-Floodgate-Timestamp: <Unix seconds>
//	X-Floodgate-Signature: sha256=<hex HMAC-SHA256(secret, timestamp + "." + body)>
//
// retried with exponential backoff and jitter (0.5 s doubling to 30 s, up
// to 8 attempts) on a network error, a 408, a 429 or a 5xx.
package alarm

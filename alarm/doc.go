// Package alarm fires quota alarms: when an API key's use of its plan's
// quota reaches a threshold of the plan (80% and 100%, say), a log line, a
// metric and a webhook say so, once per key, threshold and quota period.
// The period is the one whose end the store's decision reports (its
// ResetAfter, on the store's clock), taken to the nearest boundary of the
// quota's calendar, so that instances whose clocks are off from the
// store's (by up to half a period) name it alike.
//
// Alarms is a limiter.Observer. On the request path it only compares a
// quota hit's use with its plan's thresholds (a hit decided by its failure
// policy while the store is down says nothing about a key's use and is
// passed over); a hit past a threshold not seen yet in this process is
// queued (a bounded queue: when it is full the
// alarm is dropped and counted). A worker then claims the alarm through a
// Deduper (SET NX with a TTL to the period's end on Redis, so that one
// instance of a deployment fires it; a map in this process otherwise) and
// hands it to its webhook's own queue. An alarm dropped because a queue
// was full is not claimed (a claim taken is given back), and the key's
// first request 10 s later or after queues it again: a burst of keys
// larger than a queue delays their alarms, and loses none of them for the
// rest of their period.
//
// The webhook is a POST of a JSON body (Event) with
//
//	X-Floodgate-Timestamp: <Unix seconds>
//	X-Floodgate-Signature: sha256=<hex HMAC-SHA256(secret, timestamp + "." + body)>
//
// retried with exponential backoff and jitter (0.5 s doubling to 30 s, up
// to 8 attempts) on a network error, a 408, a 429 or a 5xx, each attempt
// signed when it is sent. A receiver checks both headers with VerifyAt,
// which also refuses a timestamp far from its clock, so that a delivery
// recorded and sent again later is refused. Each webhook
// URL has its own bounded queue and at most Options.TargetConcurrency
// deliveries under way, so that a slow or hanging receiver delays only its
// own alarms. Each attempt takes the plan's webhook and secret in force
// then: after a reload, the alarms still pending go to the plan's new
// webhook, signed with its new secret, or are dropped (and counted) when
// it has none.
//
// Redirects are never followed (a 3xx is a failure): the signed body goes
// only to the configured URL. An answer's header is bounded (64 KiB: a
// longer one fails the attempt, which is retried as a network error is)
// and at most 4 KiB of its body is read, so that a hostile or broken
// receiver cannot make each delivery hold megabytes. A webhook may not
// reach a link-local address (169.254.0.0/16, fe80::/10) or a cloud
// metadata service (169.254.169.254, fd00:ec2::254,
// metadata.google.internal, ...) unless
// its plan allows link-local targets: SetPolicy turns such a webhook off
// (CheckWebhook says why), and the address of every connection, once its
// name is resolved, is checked again as it is dialled, so that a name
// that resolves to one later is refused too. No proxy from the
// environment is used.
package alarm

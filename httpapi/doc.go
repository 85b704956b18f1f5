// Package httpapi is Floodgate's HTTP check API: services that do not sit
// behind the gateway or Envoy ask it whether an action may happen.
//
// # Requests
//
// POST /v1/check checks and charges; POST /v1/peek answers what a check
// would answer (remaining counts the peeked cost as taken) without
// charging anything. The body is one hit
//
//	{"limit": "login", "key": "1.2.3.4", "cost": 1}
//
// or a batch
//
//	{"hits": [{"limit": "login", "key": "1.2.3.4"}, {"limit": "global"}]}
//
// "limit" names a limit of the policy (required); "key" is the subject it
// counts for (default "", one shared counter); "cost" is a JSON number, a
// whole number of units, at least 1: "1", a string, is invalid_cost. A hit
// without a cost is one request of its limit, charged what the gateway
// charges one: the limit's cost in the policy file (1 unless it sets
// cost), or its estimate's default when it reads an estimate. "limit" and "key" are text, kept exactly as sent: a string
// with bytes that are not UTF-8, or a \u escape of a lone surrogate, is
// 400 bad_request (decoding them to U+FFFD, as encoding/json does, would
// put different keys on one counter); send a binary key encoded (hex,
// base64). A key longer than the engine keeps is counted under its
// SHA-256, which no other key shares (one spelled "sha256:…" included).
// Unknown fields are rejected, and a body is read strictly, so
// that what a proxy, a WAF or a log reads of it is what is charged: a key
// matches a field only when spelled exactly ("Key", "KEY", or "\u212aey"
// with a Kelvin sign, is an unknown field, not "key"), and a key given
// twice in one object, also once escaped as "k\u0065y", is refused
// rather than the last one winning, in every object of a body, the names
// of "actual" included; both are 400 bad_json naming the key and where it
// is (duplicate field "hits[1].key"). A reservation token is read by the
// same rule (one that breaks it is not a token). The hits of a batch are
// checked together and charged only if all allow (all or nothing); list
// them most specific first.
//
// # A check and the gateway
//
// A check names its limits and the keys they count for; it does not
// describe a request, so nothing the gateway reads of one applies: the
// routes and a limit's match (a check counts on any limit it names),
// access lists, the penalty box (a refused check is no offence), API keys
// and their plans (a plan's limits are named like any other). Of a
// limit's settings a check takes its parameters, shadow and failure
// policy, and, for a hit without a cost, the cost of one request (see
// above). It does not take count_on or actual, which wait for a response
// the check API never sees: a check of a login limit with count_on [401]
// is charged at once, so a service that counts failed logins only peeks
// before a login and checks after a failure, or reserves the hit and
// settles it with 0 when the login succeeds. A leaky queue's place is allowed with its "delay",
// however long (the gateway refuses a place past server.timeouts.write;
// the service holds the action itself). A limit's refusal (status, body,
// headers) shapes the gateway's 429 only: a denied check is 429.
//
// A limit's counter for a key is the same whichever front end names it,
// and the gateway names a request's key as it spells it: "global" for a
// limit keyed global, "ip:192.0.2.1" for a client's address, "user:ana",
// "key:acme" (the keys GET /api/v1/usage of the admin API takes). A check
// of such a key counts on the gateway's counter, which is how a service
// shares a limit with the gateway ({"limit": "cap", "key": "global"});
// a check of any other key, "192.0.2.1" or none, counts apart from the
// gateway's requests, for a limit keyed global too. So a service that
// checks keys its users choose (a login name) gives them a prefix of its
// own: a user who could name "ip:192.0.2.1" would spend that client's
// counter at the gateway.
//
// # Answers
//
// A decision is JSON with status 200 when allowed and 429 when denied
// (with Retry-After in whole seconds, rounded up). /v1/peek always answers
// 200. Both carry the RateLimit-Policy and RateLimit fields of the
// non-shadow limits, the binding one first, shaped by Options.Fields (in
// floodgate serve by the policy file's server.headers, as the gateway's
// are: ratelimit: false leaves them out, x_ratelimit adds the legacy
// X-RateLimit fields, binding_limit names the binding limit of a 429):
//
//	{"allowed": false, "limit": 5, "remaining": 0, "retry_after": 41.2,
//	 "reset": 41.2, "binding_limit": "login",
//	 "decisions": [{"limit": "login", "key": "1.2.3.4", "allowed": false,
//	   "capacity": 5, "remaining": 0, "retry_after": 41.2, "reset": 41.2}]}
//
// Durations are seconds with millisecond resolution (rounded up).
// "limit", "remaining" and "reset" at the top are those of the binding
// limit: the first non-shadow limit that denied, or when allowed the one
// with the fewest units left. "delay" (leaky queues: hold the action this
// long), "shadow" and "degraded" (decided by a failure policy while the
// store failed) appear when they apply.
//
// A check that was decided stands whether or not its caller is still
// there to read the answer: a caller that gave up waiting (its own
// deadline) goes ahead or not by its own failure policy, as Envoy does
// when its rate-limit call times out, and the service cannot tell which,
// so what it charged is kept (counting too much, never too little). A
// reservation is different: its caller cannot settle what it never
// learnt, so it is given back (below).
//
// # Costs known later: reserve, then settle
//
// POST /v1/reserve takes the same hits (each cost an estimate) and an
// optional "ttl" in seconds, at most 86400. Without one the reservation
// is held for its limits' reserve_ttl (the longest, when several have
// one), as the gateway holds a reservation of them; 300 when none has
// one:
//
//	{"hits": [{"limit": "tokens", "key": "key-1", "cost": 1000},
//	          {"limit": "requests", "key": "key-1"}], "ttl": 120}
//
// It reserves every estimate all or nothing, like a check, and answers
// like one, with a "reservation" token when allowed. A caller that leaves
// before its answer (it closes or resets its connection) never receives
// the token: its reservation is given back at once rather than held until
// the ttl. Concurrency limits
// may be reserved: their lease is held until the settle, or until the
// ttl passes. Nothing renews that lease, so a reservation of a
// concurrency limit lives no longer than the limit's lease_ttl: a longer
// "ttl" is 400 bad_request naming it, and the default is cut to it.
// Once the real costs are known, POST /v1/settle names the reservation:
//
//	{"reservation": "eyJpZCI6...", "actual": {"tokens": 1234}}
//
// "actual" is one number for every hit, or limit names and numbers (a
// limit not named keeps its estimate); "cancel": true gives everything
// back. Below an estimate the difference comes back, in the window or
// period the reservation charged; above it the excess is charged as far
// as the limit allows and the rest is reported as "overrun":
//
//	{"settled": true, "overrun": 0, "decisions": [{"limit": "tokens",
//	  "key": "key-1", "capacity": 90000, "remaining": 88766}, ...]}
//
// A settle is applied once its body has arrived, whether or not its
// caller stays for the answer. A reservation is settled on the limit it
// was made on, as the gateway settles a request in flight across a
// reload: a reload that changes its limit (a changed limit counts afresh)
// or removes it leaves it to be settled there, even above the estimate
// of a limit shrunk below it, by a service that ran the version it was
// made on, however many reloads changed the limit since (the token names
// the rule it was made on, and PolicyLimits remembers the rules
// reservations were made on that reloads replaced, until those
// reservations expire, at most 4096 at once: past that, those whose
// reservations end first are forgotten); on one that never did, it is 404
// unknown_reservation. A reservation not settled within its ttl
// keeps its estimate. The same settle sent again within a minute (the
// same actual costs: its caller never got the answer) is answered as the
// first was and changes nothing. A second settle at other costs, or one
// after the ttl, is 404 unknown_reservation; so is a
// settle of a reservation answered "degraded" (decided by failure
// policies while the store failed, which hold nothing to settle).
//
// Errors are JSON {"error": "...", "code": "..."}: 400 bad_json,
// bad_request (a limit or key that is not exact text, more hits than
// Options.MaxHits, 32 by default, which is refused before the body is
// decoded, among others) or
// invalid_cost (cost below 1, not a whole number, or not a number); 404
// unknown_limit or unknown_reservation; 405 method_not_allowed; 413
// too_large (body over Options.MaxBodyBytes, 64 KiB by default); 422
// never_fits (a cost above the limit's capacity, which no wait can fix) or
// unsupported_limit (a concurrency limit in a check: reserve it instead);
// 503 unavailable. An invalid
// request is rejected before the engine is asked and changes no count.
//
// # Browsers
//
// Without tokens (Options.Tokens nil) the API trusts whoever reaches it,
// and a browser that reaches it sends what any page it opens asks: a page of another site can post without a CORS preflight (a
// form, a no-cors fetch of text/plain), and one whose name was rebound to
// the API's address (DNS rebinding) calls it as its own origin and reads
// the answers. So an API without tokens answers no browser: a request
// carrying Origin (which browsers add to every POST, "null" when the page
// hides its origin) or Sec-Fetch-Site (which they add to requests for a
// loopback or https address) is 403 browser and asks the engine nothing. Services send
// neither. With tokens, a page cannot send one it does not hold (the API
// grants no CORS preflight, so a page of another site cannot send
// Authorization at all), and a request carrying a token is served whoever
// sent it.
package httpapi

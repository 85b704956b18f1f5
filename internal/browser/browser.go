// Package browser tells a request a browser sent from one a service sent,
// for the endpoints that take no token: the check API without tokens and
// the rate-limit service's /json. A browser that reaches such an endpoint
// sends what any page it opens asks: a page of another site posts without
// a CORS preflight (a form, a no-cors fetch of text/plain), and one whose
// name was rebound to the endpoint's address (DNS rebinding) calls it as
// its own origin and reads the answers. Services send neither field a
// browser adds, so these endpoints answer no browser.
package browser

import "net/http"

// Sent reports whether a browser sent r: browsers add Origin to every
// POST (the Fetch standard; "null" when the page hides its origin), and
// Sec-Fetch-Site to requests for a loopback or https address.
func Sent(r *http.Request) bool {
	return r.Header.Get("Sec-Fetch-Site") != "" || r.Header.Get("Origin") != ""
}

package config

import (
	"fmt"
	"strings"
	"testing"
)

// TestReservationOutlivesOverloadQueue: a limit that holds a reservation
// (count_on or actual) whose reserve_ttl is not longer than the max_wait
// of an overload queue on a route where it applies is refused at load,
// named by file, line and field: a request waiting in the queue would
// have its reservation expire at its estimate, and keep that charge when
// it is then shed or its client leaves (where it is to be given back in
// full) or when its answer is to settle less. A limit that cannot apply
// on the route (other routes, stages, methods, hosts or paths), or one
// whose reservation outlives the wait, loads.
func TestReservationOutlivesOverloadQueue(t *testing.T) {
	const routes = `
stages: [{name: prod, rate: 1000}, {name: beta, rate: 1000}]
routes:
  - name: slow
    match: {methods: [POST], hosts: [api.example.com], paths: ["/upload/**"]}
    upstream: http://127.0.0.1:9
    stage: prod
    overload:
      limit: 4
      queue: {size: 16, max_wait: 5s}
  - name: other
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:9
limits:
`
	for _, tc := range []struct {
		name, limit string
		want        string // "" loads
	}{
		{"count_on everywhere", `{name: fails, limit: 10, window: 1m, algorithm: fixed_window, count_on: [500], reserve_ttl: 2s}`,
			`q.yaml:15:97: limits[0].reserve_ttl: reserve_ttl 2s is not longer than the max_wait 5s of the overload queue of route "slow" (routes[0].overload.queue.max_wait)`},
		{"equal to the wait", `{name: fails, limit: 10, window: 1m, algorithm: fixed_window, count_on: [500], reserve_ttl: 5s}`,
			`limits[0].reserve_ttl: reserve_ttl 5s is not longer than the max_wait 5s`},
		{"actual on the route by name", `{name: tokens, limit: 1000, window: 1m, algorithm: fixed_window, actual: {header: X-Used}, reserve_ttl: 1s, match: {routes: [slow]}}`,
			`limits[0].reserve_ttl: reserve_ttl 1s is not longer than the max_wait 5s`},
		{"paths that meet", `{name: fails, limit: 10, window: 1m, algorithm: fixed_window, count_on: [500], reserve_ttl: 1s, match: {paths: ["/{any}/big"]}}`,
			`limits[0].reserve_ttl`},
		{"outlives the wait", `{name: fails, limit: 10, window: 1m, algorithm: fixed_window, count_on: [500], reserve_ttl: 6s}`, ""},
		{"default ttl", `{name: fails, limit: 10, window: 1m, algorithm: fixed_window, count_on: [500]}`, ""},
		{"no reservation", `{name: plain, limit: 10, window: 1m, algorithm: fixed_window}`, ""},
		{"other route", `{name: fails, limit: 10, window: 1m, algorithm: fixed_window, count_on: [500], reserve_ttl: 1s, match: {routes: [other]}}`, ""},
		{"other paths", `{name: fails, limit: 10, window: 1m, algorithm: fixed_window, count_on: [500], reserve_ttl: 1s, match: {paths: ["/login", "/download/**"]}}`, ""},
		{"other method", `{name: fails, limit: 10, window: 1m, algorithm: fixed_window, count_on: [500], reserve_ttl: 1s, match: {methods: [GET]}}`, ""},
		{"other host", `{name: fails, limit: 10, window: 1m, algorithm: fixed_window, count_on: [500], reserve_ttl: 1s, match: {hosts: ["*.example.org"]}}`, ""},
		{"other stage", `{name: fails, limit: 10, window: 1m, algorithm: fixed_window, count_on: [500], reserve_ttl: 1s, match: {stages: [beta]}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := routes + "  - " + tc.limit + "\n"
			_, err := Parse("q.yaml", []byte(src))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Errorf("loaded; want %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q; want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestReservationQueueReadsPathsAsTheGateway: whether a limit may apply on
// a route with an overload queue is judged on the paths as the gateway
// matches them: with server.format_suffix: ignore, without the final
// ".format" of a pattern's last segment, from its first dot (so a limit on
// "/login.json" applies to the requests of a route for "/login", and one on
// "/login" to those of "/login.json"), and with path_matching: exact, in
// their case. A limit that may apply there with a reserve_ttl not longer
// than the queue's max_wait is refused at its position; one that the
// gateway never applies there loads. The readings of an escaped slash need
// nothing of their own: under every server.escaped_slash the gateway
// routes and limits a request by one reading that the route's and the
// limit's patterns both match (under both, a request whose two readings
// choose different routes is refused 400 before any limit), so the cases
// below are judged alike under each.
func TestReservationQueueReadsPathsAsTheGateway(t *testing.T) {
	const file = `
server: {format_suffix: %s, path_matching: %s, escaped_slash: %s}
routes:
  - name: queued
    match: {paths: [%q]}
    upstream: http://127.0.0.1:9
    overload:
      limit: 4
      queue: {size: 16, max_wait: 5s}
limits:
  - {name: fails, limit: 10, window: 1m, algorithm: fixed_window, count_on: [401], reserve_ttl: 1s, match: {paths: [%q]}}
`
	const refused = `q.yaml:11:97: limits[0].reserve_ttl: reserve_ttl 1s is not longer than the max_wait 5s of the overload queue of route "queued" (routes[0].overload.queue.max_wait)`
	for _, tc := range []struct {
		name, format, matching, route, limit string
		want                                 string // "" loads
	}{
		// A request for /login.json is read /login, and matches both.
		{"suffix on the limit", "ignore", "exact", "/login", "/login.json", refused},
		{"suffix on the route", "ignore", "exact", "/login.json", "/login", refused},
		// From the first dot: both are /report.
		{"suffixes of several dots", "ignore", "exact", "/report.json", "/report.tar.gz", refused},
		// /files.json is /files, which /files/** matches.
		{"rest below a suffixed route", "ignore", "exact", "/files.json", "/files/**", refused},
		// The limit is /dl; the route matches /dl.json/x and below, never /dl.
		{"a rest keeps its dots", "ignore", "exact", "/dl.json/**", "/dl.json", ""},
		{"suffix kept", "keep", "exact", "/login.json", "/login", ""},
		{"a dot that starts the segment", "ignore", "exact", "/.env", "/", ""},
		// Case: exact paths never meet; folded ones do.
		{"another case, exact", "keep", "exact", "/login", "/LOGIN", ""},
		{"another case, folded", "keep", "case_insensitive", "/login", "/LOGIN", refused},
		{"suffix and case", "ignore", "case_insensitive", "/Login.JSON", "/login", refused},
		// A parameter segment is never empty: /{x} never matches /.
		{"a parameter is not the root", "keep", "exact", "/", "/{x}", ""},
		// Escaped slashes: /projects/g%2Fp/issues is the route's in the
		// reading that keeps the slash inside its segment, and never the
		// limit's there (four segments only decoded, where the route's
		// pattern does not match); a pattern that holds the escaped slash
		// meets the route in that reading (and in the decoded one of
		// /projects/g%252Fp/issues).
		{"escaped slash, decoded limit", "keep", "exact", "/projects/{id}/issues", "/projects/{group}/{name}/issues", ""},
		{"escaped slash, segment limit", "keep", "exact", "/projects/{id}/issues", "/projects/g%2Fp/issues", refused},
	} {
		for _, slash := range []string{"both", "segment", "decoded", "reject"} {
			t.Run(tc.name+"/"+slash, func(t *testing.T) {
				src := fmt.Sprintf(file, tc.format, tc.matching, slash, tc.route, tc.limit)
				_, err := Parse("q.yaml", []byte(src))
				switch {
				case tc.want == "" && err != nil:
					t.Errorf("route %s, limit %s: refused: %v", tc.route, tc.limit, err)
				case tc.want != "" && err == nil:
					t.Errorf("route %s, limit %s: loaded; want %q", tc.route, tc.limit, tc.want)
				case tc.want != "" && !strings.Contains(err.Error(), tc.want):
					t.Errorf("route %s, limit %s: error %q; want it to contain %q", tc.route, tc.limit, err, tc.want)
				}
			})
		}
	}
}

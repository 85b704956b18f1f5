package config

import (
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

package policy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/config"
)

// parse parses a file, failing the test when it is not valid.
func parse(t testing.TB, yaml string) *config.File {
	t.Helper()
	f, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return f
}

// manyRoutes is a file of n routes and n limits, one of each per
// endpoint, as an API with a large surface has: /svcI/items/{id} routes
// and, per endpoint, a limit of its writes and a limit of one route, with
// a catch-all route and a global limit after them.
func manyRoutes(n int) string {
	var b strings.Builder
	b.WriteString("routes:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {name: r%d, match: {paths: [\"/svc%d/items/{id}\", \"/svc%d/items/{id}/**\"]}, upstream: none}\n", i, i, i)
	}
	b.WriteString("  - {name: rest, match: {paths: [\"/**\"]}, upstream: none}\nlimits:\n")
	for i := range n {
		switch i % 2 {
		case 0:
			fmt.Fprintf(&b, "  - {name: l%d, rate: 10, key: client_ip, match: {methods: [POST, PUT], paths: [\"/svc%d/items/*\"]}}\n", i, i)
		default:
			fmt.Fprintf(&b, "  - {name: l%d, rate: 10, key: client_ip, match: {routes: [r%d]}}\n", i, i)
		}
	}
	b.WriteString("  - {name: flood, rate: 1000, key: client_ip, scope: global}\n")
	return b.String()
}

// BenchmarkMatchRoutes matches a request on one endpoint of files of 10
// to 10,000 routes and limits.
func BenchmarkMatchRoutes(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			p := compile(b, manyRoutes(n))
			r := &Request{Method: "POST", Host: "api.example.com", Path: fmt.Sprintf("/svc%d/items/42", n/2),
				ClientIP: ip("198.51.100.7"), Header: http.Header{}}
			var m Match
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				p.Match(r, &m)
			}
			if m.Route == nil || m.Route.Name != fmt.Sprintf("r%d", n/2) || len(m.Limits) != 2 {
				b.Fatalf("route %v, %d limits", m.Route, len(m.Limits))
			}
		})
	}
}

// BenchmarkCompileRoutes compiles files of 1,000 and 10,000 routes and
// limits (parsing not included).
func BenchmarkCompileRoutes(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			f := parse(b, manyRoutes(n))
			for b.Loop() {
				if _, err := Compile(f, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

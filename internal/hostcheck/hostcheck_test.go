package hostcheck

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHandlerServesOnlyNamedHosts: a real listener on loopback behind
// Handler serves IP addresses, localhost, names under .localhost and the
// listed names (any case, with or without a final dot), and answers any
// other Host 421 naming the listener and its setting, closing the
// connection.
func TestHandlerServesOnlyNamedHosts(t *testing.T) {
	srv := httptest.NewServer(Handler(Options{Listener: "ops", Setting: "server.ops_hosts", Names: []string{"Scrape.Example."}},
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "served\n") })))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		host string
		want int
	}{
		{"10.0.0.7:9102", 200},
		{"[fd00::1]:9102", 200},
		{"[::1]", 200},
		{"localhost", 200},
		{"a.localhost:9102", 200},
		{"scrape.example:9102", 200},
		{"SCRAPE.EXAMPLE.", 200},
		{"rebound.example:9102", 421},
		{"scrape.example.rebound.example", 421},
		{"localhost.rebound.example", 421},
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/metrics", nil)
		req.Host = c.host
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("Host %q: %d %q, want %d", c.host, resp.StatusCode, b, c.want)
		}
		if c.want == 421 && (!strings.Contains(string(b), "the ops listener") || !strings.Contains(string(b), "server.ops_hosts") || !resp.Close) {
			t.Errorf("Host %q: %q (connection closed: %v), want the listener, its setting and the connection closed", c.host, b, resp.Close)
		}
	}
}

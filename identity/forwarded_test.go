package identity

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestForwardedQuotedValuesStayInTheirElement: a Forwarded element a
// trusted proxy writes may carry a quoted value copied from the client (the
// Host it asked for, host="..."). A comma or a semicolon inside the quotes
// neither starts another element nor another parameter, so a client cannot
// name the address it is counted under through its Host; an element that
// names two clients is unreadable; a client's unbalanced quote left of the
// proxy's element changes nothing. The requests come over loopback from
// 127.0.0.1, a trusted proxy.
func TestForwardedQuotedValuesStayInTheirElement(t *testing.T) {
	t.Parallel()
	r, err := NewResolver(Options{TrustedProxies: prefixes(t, "127.0.0.0/8"), ForwardedHeader: "Forwarded"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.WriteString(w, r.Client(req).ClientKey)
	}))
	defer srv.Close()

	for _, tc := range []struct{ name, value, want string }{
		{"host with a comma and for=, for first",
			`for=198.51.100.7;host="a,for=9.9.9.9;x=";proto=https`, "198.51.100.7"},
		{"host with a comma and for=, for last",
			`proto=https;host="a,for=9.9.9.9;x=";for=198.51.100.7`, "198.51.100.7"},
		{"host with a semicolon and for=",
			`host="x;for=9.9.9.9;";for=198.51.100.7`, "198.51.100.7"},
		{"escaped quotes in host",
			`for=198.51.100.7;host="a\",for=9.9.9.9;x=\""`, "198.51.100.7"},
		{"escaped backslash before the closing quote",
			`for=198.51.100.7;host="a\\",for=9.9.9.9`, "9.9.9.9"},
		{"client's unbalanced quote left of the proxy's element",
			`for="6.6.6.6, for=198.51.100.7`, "198.51.100.7"},
		{"two for= in one element",
			`host=x;for=9.9.9.9;for=198.51.100.7`, "unknown@127.0.0.1"},
		{"quoted comma in the element behind a trusted hop",
			`for="[2001:db8::1]:80";host="a,b", for=127.0.0.2`, "2001:db8::/64"},
	} {
		req, err := http.NewRequest("GET", srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Forwarded", tc.value)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("%s: Forwarded: %s counted as %q, want %q", tc.name, tc.value, got, tc.want)
		}
	}
}

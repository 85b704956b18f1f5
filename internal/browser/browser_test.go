package browser_test

import (
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/floodgate/floodgate/internal/browser"
)

// TestSent: the fields a browser adds mark a request as a browser's,
// whatever their value ("null" for a page that hides its origin, "none"
// for a navigation the user started); a service's request carries neither.
func TestSent(t *testing.T) {
	for _, c := range []struct {
		fields map[string]string
		want   bool
	}{
		{nil, false},
		{map[string]string{"User-Agent": "Mozilla/5.0", "Content-Type": "text/plain"}, false},
		{map[string]string{"Sec-Fetch-Mode": "cors"}, false}, // Node's fetch sends this alone
		{map[string]string{"Origin": "http://evil.example"}, true},
		{map[string]string{"Origin": "null"}, true},
		{map[string]string{"Sec-Fetch-Site": "cross-site"}, true},
		{map[string]string{"Sec-Fetch-Site": "same-origin"}, true},
		{map[string]string{"Sec-Fetch-Site": "none"}, true},
	} {
		r := httptest.NewRequest("POST", "http://127.0.0.1:8081/v1/check", nil)
		for k, v := range c.fields {
			r.Header.Set(k, v)
		}
		if got := browser.Sent(r); got != c.want {
			t.Errorf("%v: Sent = %v, want %v", c.fields, got, c.want)
		}
	}
}

func ExampleSent() {
	r := httptest.NewRequest("POST", "http://127.0.0.1:8081/v1/check", nil)
	fmt.Println(browser.Sent(r))
	r.Header.Set("Origin", "http://rebound.example")
	fmt.Println(browser.Sent(r))
	// Output:
	// false
	// true
}

package identity_test

import (
	"fmt"
	"net/http/httptest"
	"net/netip"

	"github.com/floodgate/floodgate/identity"
)

func ExampleResolver_Resolve() {
	r, err := identity.NewResolver(identity.Options{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		UserHeader:     "X-User",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Behind the load balancer 10.0.0.2: the client added a fake hop.
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.0.0.2:51000"
	req.Header.Set("X-Forwarded-For", "6.6.6.6, 2001:db8:1:2::99, 10.0.0.9")
	req.Header.Set("X-User", "parent-42")
	id := r.Resolve(req)
	fmt.Println(id.ClientIP, id.ClientKey, id.User)

	// Straight from the internet: forwarding headers are not believed.
	req.RemoteAddr = "203.0.113.5:40000"
	id = r.Resolve(req)
	fmt.Println(id.ClientIP, id.ClientKey, id.User == "")
	// Output:
	// 2001:db8:1:2::99 2001:db8:1:2::/64 parent-42
	// 203.0.113.5 203.0.113.5 true
}

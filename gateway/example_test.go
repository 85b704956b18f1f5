package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
)

// Example wraps a service's handler with the school's policy: the trial
// plan's key has a quota of 3 requests a day, the 4th gets 429.
func Example() {
	file, _ := config.Load("../examples/school.yaml")
	pol, _ := policy.Compile(file, nil)
	matcher, _ := gateway.NewPolicyMatcher(gateway.Fixed(pol), gateway.PolicyMatcherOptions{})
	store, _ := memstore.New(memstore.Options{})
	defer store.Close()
	gw, _ := gateway.New(gateway.Options{Matcher: matcher, Engine: limiter.New(store, limiter.Options{})})

	students := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"id":9,"name":"Jomo"}`)
	})
	srv := httptest.NewServer(gw.Middleware(students))
	defer srv.Close()

	for i := 0; i < 4; i++ {
		req, _ := http.NewRequest("GET", srv.URL+"/partner/students/9", nil)
		req.Header.Set("x-api-key", "key-trial")
		resp, _ := http.DefaultClient.Do(req)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		binding, _, _ := strings.Cut(resp.Header.Get("RateLimit"), ";t=")
		fmt.Println(resp.StatusCode, binding, strings.TrimSpace(string(body)))
	}
	// Output:
	// 200 "trial.quota";r=2 {"id":9,"name":"Jomo"}
	// 200 "trial.quota";r=1 {"id":9,"name":"Jomo"}
	// 200 "trial.quota";r=0 {"id":9,"name":"Jomo"}
	// 429 "trial.quota";r=0 {"message":"Limit Exceeded"}
}

package guard_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/guard"
	"github.com/floodgate/floodgate/guard/redisguard"
)

// Example protects a handler with the school's policy file: the trial
// plan's key has a quota of 3 requests a day, and the 4th gets 429. The
// Guard applies each new version of the file as it is saved.
func Example() {
	g, err := guard.New(guard.File("../examples/school.yaml"), guard.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()

	students := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"id":9,"name":"Jomo"}`)
	})
	srv := httptest.NewServer(g.Middleware(students))
	defer srv.Close()

	for range 4 {
		req, _ := http.NewRequest("GET", srv.URL+"/partner/students/9", nil)
		req.Header.Set("x-api-key", "key-trial")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	// Output:
	// 200 {"id":9,"name":"Jomo"}
	// 200 {"id":9,"name":"Jomo"}
	// 200 {"id":9,"name":"Jomo"}
	// 429 {"message":"Limit Exceeded"}
}

// ExampleLimits protects a handler with limits written in code: 3
// requests a minute per client address, and 100 a second for the whole
// service.
func ExampleLimits() {
	g, err := guard.New(guard.Limits(
		guard.Limit{Name: "per-client", Rate: 3, Per: time.Minute},
		guard.Limit{Name: "service", Rate: 100, Key: "global"},
	), guard.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()

	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	srv := httptest.NewServer(g.Middleware(hello))
	defer srv.Close()

	for range 4 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	}
	// Output:
	// 200 "per-client";q=3;w=60, "service";q=100;w=1
	// 200 "per-client";q=3;w=60, "service";q=100;w=1
	// 200 "per-client";q=3;w=60, "service";q=100;w=1
	// 429 "per-client";q=3;w=60, "service";q=100;w=1
}

// ExampleLimits_problems shows what New says of limits that break the
// rules of a policy file's limits: each problem at its field.
func ExampleLimits_problems() {
	_, err := guard.New(guard.Limits(
		guard.Limit{Name: "login", Algorithm: floodgate.SlidingLog, Max: 5, Rate: 1},
	), guard.Options{})
	fmt.Println(err)
	// Output:
	// guard.Limits: limits[0].window: window must be a positive duration, got 0s
	// guard.Limits: limits[0].rate: rate does not apply to sliding_log
}

// ExampleOptions_redis counts in Redis, shared by every instance of the
// service, when the policy file's server.store is a Redis URL.
func ExampleOptions_redis() {
	g, err := guard.New(guard.File("policy.yaml"), guard.Options{OpenStore: redisguard.Open})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	http.Handle("/", g.Middleware(http.NotFoundHandler()))
}

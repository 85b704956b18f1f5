package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/httpapi"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

func Example() {
	st, _ := memstore.New(memstore.Options{})
	defer st.Close()
	login, _ := limiter.NewRule(floodgate.Limit{Name: "login", Algorithm: floodgate.FixedWindow,
		Max: 2, Window: time.Hour}, floodgate.FailClosed, false)
	api := httpapi.New(limiter.New(st, limiter.Options{}), httpapi.Rules(login), httpapi.Options{})
	srv := httptest.NewServer(api)
	defer srv.Close()

	for range 3 {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/v1/check",
			strings.NewReader(`{"limit":"login","key":"alice"}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	}
	// Output:
	// 200 "login";q=2;w=3600
	// 200 "login";q=2;w=3600
	// 429 "login";q=2;w=3600
}

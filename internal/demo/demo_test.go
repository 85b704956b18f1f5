package demo

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestDemoRoutes(t *testing.T) {
	t.Parallel()
	s, err := Start("")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	cases := []struct {
		method, path, body string
		status             int
		contains           string
	}{
		{"GET", "/notices", "", 200, "Sports day"},
		{"GET", "/partner/students/9", "", 200, `"id":9`},
		{"GET", "/students/3", "", 200, `"id":3`},
		{"GET", "/notices/2", "", 200, `Notice 2`},
		{"GET", "/notices/7", "", 404, `no such`},
		{"POST", "/notices/urgent", "", 202, `SMS`},
		{"GET", "/partner/students/x", "", 400, "number"},
		{"POST", "/login", `{"user":"ana","password":"nope"}`, 401, "wrong"},
		{"POST", "/login", `{"user":"ana","password":"` + Password + `"}`, 200, "welcome, ana"},
		{"POST", "/login", `not json`, 400, "JSON"},
		{"POST", "/reports?ms=1", "", 200, "attendance"},
		{"POST", "/reports?ms=-1", "", 400, "ms"},
		{"GET", "/", "", 200, "school office"},
		{"GET", "/nothing", "", 404, "Not Found"},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, s.URL+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.contains) {
			t.Errorf("%s %s: %d %s, want %d containing %q", c.method, c.path, resp.StatusCode, b, c.status, c.contains)
		}
		if !json.Valid(b) || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: not JSON: %q", c.method, c.path, b)
		}
	}
	if got := s.API.Served(); got != int64(len(cases)) {
		t.Errorf("served %d, want %d", got, len(cases))
	}
}

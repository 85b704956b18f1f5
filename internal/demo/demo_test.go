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

// TestDemoChat asks the demo's language model for completions, plain and
// streamed: both report the same usage, and a stream's last event before
// [DONE] carries it.
func TestDemoChat(t *testing.T) {
	s, err := Start("")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	}()
	post := func(body string) (*http.Response, string) {
		resp, err := http.Post(s.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	resp, body := post(`{"model":"m","messages":[{"role":"user","content":"two words"}],"max_tokens":1000}`)
	var out struct {
		Usage usage `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s %v", resp.StatusCode, body, err)
	}
	if want := (usage{Prompt: 5, Completion: 29, Total: 34}); out.Usage != want {
		t.Fatalf("usage %+v, want %+v", out.Usage, want)
	}
	resp, body = post(`{"messages":[{"role":"user","content":"two words"}],"max_tokens":7,"stream":true}`)
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %s", resp.Header.Get("Content-Type"))
	}
	events := strings.Split(strings.TrimSpace(body), "\n\n")
	if len(events) != 7+2 || events[len(events)-1] != "data: [DONE]" ||
		!strings.Contains(events[len(events)-2], `"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}`) {
		t.Fatalf("stream events: %q", events)
	}
	if resp, _ := post(`{"max_tokens":0}`); resp.StatusCode != 400 {
		t.Errorf("max_tokens 0: %d", resp.StatusCode)
	}
}

package main

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// TestDemoUpstreamAnswersByRoute: with --demo every route goes to the one
// demo upstream; its answers are still counted under each request's route,
// on each engine.
func TestDemoUpstreamAnswersByRoute(t *testing.T) { forEngines(t, testDemoUpstreamAnswersByRoute) }

func testDemoUpstreamAnswersByRoute(t *testing.T, engine string) {
	gw, admin, _ := school(t, "--engine", engine, "--log-level", "error")
	resp, err := http.Post(gw+"/login", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for range 2 {
		if code, _, _ := get(t, gw+"/students/9"); code != 200 {
			t.Fatalf("/students/9: %d", code)
		}
	}
	text := metricsText(t, admin)
	count := func(route string) string {
		m := regexp.MustCompile(`(?m)^floodgate_upstream_responses_total\{code="\d+",route="` + route + `"\} (\d+)$`).FindStringSubmatch(text)
		if m == nil {
			return "none"
		}
		return m[1]
	}
	if got := count("students"); got != "2" {
		t.Errorf("students: %s upstream answers, want 2\n%s", got, grepLines(text, "floodgate_upstream_responses_total"))
	}
	if got := count("login"); got != "1" {
		t.Errorf("login: %s upstream answers, want 1\n%s", got, grepLines(text, "floodgate_upstream_responses_total"))
	}
}

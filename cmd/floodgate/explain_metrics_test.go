package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/gateway"
)

// rejections returns the floodgate_rejections_total lines of a scrape.
func rejections(metrics string) string {
	var out []string
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "floodgate_rejections_total{") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestExplainCountsNoRejection: an explanation whose answer is a refusal
// (a 429 on a limit, a 403 for an unknown API key, a 400 for a key sent
// twice) is a look, not a request served: floodgate_rejections_total
// counts the gateway's answers only.
func TestExplainCountsNoRejection(t *testing.T) {
	up := replayUpstream(t)
	cfg := writeExplainPolicy(t, up.URL)
	gw, admin, _, out := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	ops := opsURL(t, out.String())
	for i := range 4 { // a burst of 3, then a refusal
		code, _, _ := get(t, gw+"/students/9")
		if want := map[bool]int{true: 200, false: 429}[i < 3]; code != want {
			t.Fatalf("request %d: %d, want %d", i, code, want)
		}
	}
	if code, _, _ := get(t, gw+"/partner/x", "X-Api-Key", "guess"); code != 403 {
		t.Fatalf("unknown key: %d", code)
	}
	before := rejections(scrape(t, ops))
	if !regexp.MustCompile(`limit="stage.dev"} 1\b`).MatchString(before) {
		t.Fatalf("the gateway's refusal is not counted:\n%s", before)
	}
	for _, er := range []gateway.ExplainRequest{
		{Method: "GET", Path: "/students/9", IP: "127.0.0.1"},
		{Method: "GET", Path: "/partner/x", IP: "127.0.0.1", Headers: map[string]string{"X-Api-Key": "guess"}},
		{Method: "GET", Path: "/partner/x", IP: "127.0.0.1", Headers: map[string]string{"X-Api-Key": "raw-1", "x-api-key": "raw-2"}},
	} {
		for range 3 {
			e := explainHTTP(t, admin, er)
			if e.Answer.Status < 400 {
				t.Fatalf("%+v: answer %+v, want a refusal", er, e.Answer)
			}
		}
	}
	if after := rejections(scrape(t, ops)); after != before {
		t.Errorf("explanations counted as rejections:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

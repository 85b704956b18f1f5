package main

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/redistest"
)

// TestServeOnSentinel serves the school example with its counters in a
// Redis found through a real sentinel, named as the Redis store reads a
// sentinel URL (the sentinels, then the master's name): the policy file
// takes what the store opens, and the store decides. The stage dev allows
// 5 a second in bursts of 5: eight requests at once give 200 x5, 429 x3,
// and the counters are in the primary.
func TestServeOnSentinel(t *testing.T) {
	primary := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, primary, "school")
	cfg := schoolOnStore(t, "redis+sentinel://"+sentinel.Addr+"/school")

	var out bytes.Buffer
	if err := run(t.Context(), []string{"check", "--config", cfg}, &out, &out); err != nil {
		t.Fatalf("check refuses a sentinel URL the store opens: %v\n%s", err, out.String())
	}
	gw, _, _, stdout := startServe(t, "--config", cfg, "--demo", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "warn")
	if !strings.Contains(stdout.String(), "store redis+sentinel") {
		t.Fatalf("serve does not say its store:\n%s", stdout.String())
	}
	var codes []string
	for range 8 {
		resp, err := http.Get(gw + "/students/9")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes = append(codes, strconv.Itoa(resp.StatusCode))
	}
	if got := strings.Join(codes, " "); got != "200 200 200 200 200 429 429 429" {
		t.Fatalf("eight requests at once: %s, want 200 x5 then 429 x3", got)
	}
	n, err := primary.Do("DBSIZE")
	if err != nil {
		t.Fatal(err)
	}
	if n == "0" {
		t.Fatal("no counter in the primary the sentinel names")
	}
}

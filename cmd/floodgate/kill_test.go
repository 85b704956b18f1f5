package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redistest"
)

// TestKilledGatewayKeepsReservations: floodgate serve with the token
// limits of examples/llm.yaml is killed (SIGKILL) while three streamed
// completions, each reserving 9,000 tokens, wait on a slow upstream; a
// new process on the same state file (once a snapshot has the
// reservations) or on the same Redis still counts each at its estimate,
// on the daily quota and on the per-minute bucket (less what refilled).
func TestKilledGatewayKeepsReservations(t *testing.T) {
	for _, store := range stores {
		t.Run(store, func(t *testing.T) { testKilledGatewayKeepsReservations(t, store) })
	}
}

func testKilledGatewayKeepsReservations(t *testing.T, store string) {
	// The upstream streams one event of a completion and then waits for
	// its client to go; a completion not streamed reports 1 token.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"c","choices":[{"message":{"role":"assistant","content":"."}}],"usage":{"prompt_tokens":0,"completion_tokens":1,"total_tokens":1}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"once\"}}]}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer up.Close()

	dir := t.TempDir()
	server := "  store: memory\n  state_file: state.bin"
	if store == "redis" {
		rs := redistest.Start(t)
		server = "  store: redis://" + rs.Addr + "/0\n  store_timeout: 2s"
	}
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", "llm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(src)
	for _, r := range []struct{ re, with string }{
		{`(?m)^  store: .*$`, server},
		{`(?m)^  listen: .*$`, `  listen: "127.0.0.1:0"`},
		{`(?m)^  admin_listen: .*$`, `  admin_listen: "127.0.0.1:0"`},
		{`(?m)^    upstream: .*$`, "    upstream: " + up.URL},
	} {
		if !regexp.MustCompile(r.re).MatchString(cfg) {
			t.Fatalf("examples/llm.yaml has no line %s", r.re)
		}
		cfg = regexp.MustCompile(r.re).ReplaceAllLiteralString(cfg, r.with)
	}
	path := filepath.Join(dir, "llm.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	p := startProc(t, "--config", path, "--log-level", "warn")
	const n, estimate = 3, 9000
	stream := fmt.Sprintf(`{"model":"m","max_tokens":%d,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, estimate)
	u, _ := url.Parse(p.gw)
	started := time.Now()
	for i := range n {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
		if _, err := io.WriteString(c, rawPost("/v1/chat/completions", stream, "Authorization: Bearer key-globex")); err != nil {
			t.Fatal(err)
		}
		// Read up to the first event: the reservation is made and the
		// answer has begun.
		br := bufio.NewReader(c)
		status, err := br.ReadString('\n')
		if err != nil || !strings.HasPrefix(status, "HTTP/1.1 200") {
			t.Fatalf("stream %d: %q %v", i, status, err)
		}
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("stream %d: %v", i, err)
			}
			if strings.Contains(line, "data: ") {
				break
			}
		}
	}
	inFlight := time.Now()
	if store == "memory" {
		// A snapshot after the reservations, and none for two snapshot
		// intervals since (one is written only after a change): the
		// newest holds them.
		state := filepath.Join(dir, "state.bin")
		var last time.Time
		var stable time.Time
		waitUntil(t, "a snapshot of the state file holding the reservations", 30*time.Second, func() bool {
			fi, err := os.Stat(state)
			if err != nil || !fi.ModTime().After(inFlight) {
				return false
			}
			if !fi.ModTime().Equal(last) {
				last, stable = fi.ModTime(), time.Now()
			}
			return time.Since(stable) > 2500*time.Millisecond
		})
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done

	p2 := startProc(t, "--config", path, "--log-level", "warn")
	code, hdr, body := post(t, http.DefaultClient, p2.gw+"/v1/chat/completions", `{"model":"m","max_tokens":1,"messages":[]}`,
		"Authorization", "Bearer key-globex")
	elapsed := time.Since(started)
	if code != 200 {
		t.Fatalf("after the restart: %d %s", code, body)
	}
	left := func(limit string) int {
		m := regexp.MustCompile(`"` + limit + `";r=(\d+)`).FindStringSubmatch(hdr.Get("RateLimit"))
		if m == nil {
			t.Fatalf("no %s in RateLimit %q", limit, hdr.Get("RateLimit"))
		}
		v, _ := strconv.Atoi(m[1])
		return v
	}
	// The probe reserved 1 and used 1.
	if used := 2_000_000 - 1 - left("tokens-per-day"); used != n*estimate {
		t.Errorf("the daily quota after a SIGKILL and a restart counts %d tokens, want the %d reserved", used, n*estimate)
	}
	// 90,000 a minute refill 1,500 a second.
	refilled := int(elapsed.Seconds()*1500) + 1
	if l := left("tokens-per-minute"); l > 90_000-n*estimate-1+refilled {
		t.Errorf("the per-minute bucket after a SIGKILL and a restart has %d tokens left, want at most %d (%d reserved, %v to refill)",
			l, 90_000-n*estimate-1+refilled, n*estimate, elapsed)
	}
}

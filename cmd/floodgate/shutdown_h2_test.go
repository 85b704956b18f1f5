package main

import (
	"crypto/tls"
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestShutdownTellsHTTP2ClientsBesideSilentOnes: floodgate serve, on both
// engines, shutting down with a long timeout, tells its idle HTTP/2
// connections over TLS to go away (GOAWAY) and closes them within about a
// second, beside as many TLS connections that chose HTTP/2 by ALPN and
// never sent their preface, which are closed as the shutdown begins: none
// holds the shutdown (or the others' GOAWAY) for the HTTP/2 server's own
// 10 s bound on the preface.
func TestShutdownTellsHTTP2ClientsBesideSilentOnes(t *testing.T) {
	forEngines(t, testShutdownTellsHTTP2ClientsBesideSilentOnes)
}

func testShutdownTellsHTTP2ClientsBesideSilentOnes(t *testing.T, engine string) {
	const silent, idle = 20, 20
	up := newRecordingUpstream(t)
	cfg, ca := tlsGatewayFile(t, "{read_header: 1m, read: 1m, idle: 1m}", up.URL)
	gw, _, stop, _ := startServe(t, "--engine", engine, "--config", cfg, "--watch=false", "--shutdown-timeout", "1m",
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	addr := strings.TrimPrefix(gw, "https://")
	dial := func() *tls.Conn {
		t.Helper()
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool, ServerName: "gw.example", NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
			t.Fatalf("ALPN chose %q", p)
		}
		return c
	}
	// ended is closed when the server closed a connection; goAway when it
	// told the connection to go away.
	type client struct{ ended, goAway chan time.Time }
	var silents, idles []client
	for range silent {
		c := dial()
		cl := client{ended: make(chan time.Time, 1)}
		go func() {
			_, _ = io.Copy(io.Discard, c)
			cl.ended <- time.Now()
		}()
		silents = append(silents, cl)
	}
	for range idle {
		c := dial()
		if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
			t.Fatal(err)
		}
		fr := http2.NewFramer(c, c)
		if err := fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
		// The server's settings, then the acknowledgement of the client's.
		acked := false
		for !acked {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("an HTTP/2 client before the shutdown: %v", err)
			}
			if s, ok := f.(*http2.SettingsFrame); ok {
				if s.IsAck() {
					acked = true
				} else if err := fr.WriteSettingsAck(); err != nil {
					t.Fatal(err)
				}
			}
		}
		cl := client{ended: make(chan time.Time, 1), goAway: make(chan time.Time, 1)}
		go func() {
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					cl.ended <- time.Now()
					return
				}
				if _, ok := f.(*http2.GoAwayFrame); ok {
					cl.goAway <- time.Now()
				}
			}
		}()
		idles = append(idles, cl)
	}

	start := time.Now()
	type result struct {
		err error
		at  time.Duration
	}
	stopped := make(chan result, 1)
	go func() {
		err := stop()
		stopped <- result{err, time.Since(start)}
	}()
	// net/http closes an idle HTTP/2 connection a second after its GOAWAY:
	// 5 s is a bound for a loaded machine, well short of the 10 s the HTTP/2
	// server waits for a preface.
	const bound = 5 * time.Second
	within := func(what string, ch chan time.Time, n int) {
		t.Helper()
		late := n
		var last time.Duration
		deadline := time.After(time.Until(start.Add(bound)))
	collect:
		for range n {
			var at time.Time
			select {
			case at = <-ch: // one that came is counted, the bound passed or not
			default:
				select {
				case at = <-ch:
				case <-deadline:
					break collect
				}
			}
			late--
			last = max(last, at.Sub(start))
		}
		t.Logf("%s: %d of %d within %v, the last %v into the shutdown", what, n-late, n, bound, last.Round(time.Millisecond))
		if late > 0 {
			t.Errorf("%s: %d of %d not within %v of the shutdown", what, late, n, bound)
		}
	}
	goAways, idleEnds, silentEnds := make(chan time.Time, idle), make(chan time.Time, idle), make(chan time.Time, silent)
	for _, cl := range idles {
		go func() {
			select {
			case at := <-cl.goAway:
				goAways <- at
			case <-cl.ended:
				return // no GOAWAY
			}
			idleEnds <- <-cl.ended
		}()
	}
	for _, cl := range silents {
		go func() { silentEnds <- <-cl.ended }()
	}
	within("idle HTTP/2 connections told to go away", goAways, idle)
	within("idle HTTP/2 connections closed after their GOAWAY", idleEnds, idle)
	within("connections without a preface closed", silentEnds, silent)
	select {
	case r := <-stopped:
		t.Logf("serve returned %v into the shutdown", r.at.Round(time.Millisecond))
		if r.err != nil {
			t.Fatal(r.err)
		}
	case <-time.After(time.Until(start.Add(bound))):
		r := <-stopped
		t.Errorf("serve returned %v into the shutdown (%v), with nothing in flight: want within %v",
			r.at.Round(time.Millisecond), r.err, bound)
	}
}

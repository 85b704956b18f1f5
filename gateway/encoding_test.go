package gateway

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
)

// TestUpstreamAskedForTheClientsEncodings: the upstream is asked for the
// content codings the client asked for and no others, on each engine. A
// client that names none gets the body as the upstream sent it, not a body
// the upstream compressed for the gateway and the gateway decompressed
// again (CPU on both sides, and an answer whose length and validators are
// not the upstream's); one that asks for gzip gets the compressed body
// whole.
func TestUpstreamAskedForTheClientsEncodings(t *testing.T) {
	t.Parallel()
	forFronts(t, proxyFronts, testUpstreamAskedForTheClientsEncodings)
}

func testUpstreamAskedForTheClientsEncodings(t *testing.T, fr string) {
	rule := ruletest.Rule(t, floodgate.Limit{Name: "wide", Algorithm: floodgate.FixedWindow, Max: 100, Window: time.Hour})
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, _ = io.WriteString(zw, "compressed by the upstream\n")
	_ = zw.Close()
	asked := make(chan []string, 1)
	_, base, _ := startFront(t, fr, Options{Matcher: oneRule(rule), Engine: memEngine(t)},
		func(w http.ResponseWriter, r *http.Request) {
			asked <- r.Header.Values("Accept-Encoding")
			// As an upstream that compresses whenever it may.
			if r.Header.Get("Accept-Encoding") == "gzip" {
				w.Header().Set("Content-Encoding", "gzip")
				w.Header().Set("Content-Length", strconv.Itoa(zipped.Len()))
				_, _ = w.Write(zipped.Bytes())
				return
			}
			_, _ = io.WriteString(w, "plain\n")
		})
	// A client that neither asks for a coding nor decodes one.
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	a := do(t, c, "GET", base+"/x", nil)
	if got := <-asked; len(got) != 0 {
		t.Errorf("a client that named no coding: the upstream was asked for %q", got)
	}
	if a.status != 200 || a.body != "plain\n" || a.header.Get("Content-Encoding") != "" {
		t.Errorf("a client that named no coding got %d %q, Content-Encoding %q", a.status, a.body, a.header.Get("Content-Encoding"))
	}

	a = do(t, c, "GET", base+"/x", map[string]string{"Accept-Encoding": "gzip"})
	if got := <-asked; len(got) != 1 || got[0] != "gzip" {
		t.Errorf("a client that asked for gzip: the upstream was asked for %q", got)
	}
	if a.status != 200 || a.body != zipped.String() || a.header.Get("Content-Encoding") != "gzip" ||
		a.header.Get("Content-Length") != strconv.Itoa(zipped.Len()) {
		t.Errorf("a client that asked for gzip got %d, %d bytes (want the %d compressed), Content-Encoding %q, Content-Length %q",
			a.status, len(a.body), zipped.Len(), a.header.Get("Content-Encoding"), a.header.Get("Content-Length"))
	}
}

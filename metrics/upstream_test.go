package metrics_test

import (
	"bytes"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/internal/promtest"
	"github.com/floodgate/floodgate/internal/testcerts"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestUpstreamStatusesBounded: an HTTP/2 upstream may send any integer
// as its :status; through the gateway, 40 answers of 40 statuses that are
// not three digits share one series of their route and count there (code
// InvalidStatus), and each client gets 502.
func TestUpstreamStatusesBounded(t *testing.T) {
	t.Parallel()
	ca, err := testcerts.NewCA(t.TempDir(), "up")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Server("up")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
		next  = 1000
	)
	defer func() {
		lis.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	// The upstream answers each request with the next status from 1000
	// on, in raw HTTP/2 frames (a Go server would refuse to send them).
	status := func() string {
		mu.Lock()
		defer mu.Unlock()
		next++
		return strconv.Itoa(next)
	}
	wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { serveH2(c, status) })
		}
	})

	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	up, err := url.Parse("https://" + lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Options{
		Matcher: gateway.MatcherFunc(func(_ *gateway.Request, mt *gateway.Match) error {
			mt.Route, mt.Upstream = "api", up
			return nil
		}),
		Engine:   limiter.New(store, limiter.Options{Observer: m}),
		Observer: m,
		Upstream: gateway.TransportOptions{TLS: &tls.Config{RootCAs: ca.Pool, ServerName: "localhost"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewUnstartedServer(g)
	// The gateway's server logs what it makes of such answers: not ours
	// to read here.
	front.Config.ErrorLog = log.New(io.Discard, "", 0)
	front.Start()
	defer front.Close()
	client := front.Client()
	defer client.CloseIdleConnections()
	const answers = 40
	for i := range answers {
		resp, err := client.Get(front.URL + "/x")
		if err != nil {
			// net/http's server cannot write such a status: relayed, it
			// panicked and dropped the connection.
			t.Fatalf("answer %d: %v; want a 502", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 502 {
			t.Fatalf("answer %d: %s; want 502", i, resp.Status)
		}
	}
	series := promtest.Find(t, reg, "floodgate_upstream_responses_total", promtest.Labels{"route": "api"})
	if len(series) != 1 {
		t.Errorf("%d series for route api, want 1", len(series))
	}
	if got := promtest.Value(t, reg, "floodgate_upstream_responses_total", promtest.Labels{"route": "api"}); got != answers {
		t.Errorf("route api counted %v answers, want %d", got, answers)
	}
	// The statuses an upstream may send that are not three digits share
	// their route's code InvalidStatus; the others keep their own.
	m.Upstream("direct", -7)
	m.Upstream("direct", 1000)
	m.Upstream("direct", 1<<40)
	m.Upstream("direct", 999)
	for code, want := range map[string]float64{metrics.InvalidStatus: 3, "999": 1} {
		if got := promtest.Value(t, reg, "floodgate_upstream_responses_total", promtest.Labels{"route": "direct", "code": code}); got != want {
			t.Errorf("code %s counted %v, want %v", code, got, want)
		}
	}
}

// serveH2 answers every request on c with HEADERS carrying status() and
// no body, until c fails.
func serveH2(c net.Conn, status func() string) {
	defer c.Close()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		return
	}
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					return
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		case *http2.HeadersFrame:
			buf.Reset()
			_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: status()})
			_ = enc.WriteField(hpack.HeaderField{Name: "content-length", Value: "0"})
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: buf.Bytes(),
				EndHeaders: true, EndStream: true}); err != nil {
				return
			}
		}
	}
}

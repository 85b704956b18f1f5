package app

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/floodgate/floodgate/gateway"
)

// BenchmarkServedReject: the 429 path of a gateway built as floodgate
// serve builds it (its metrics, the console's observers and gatekeeper,
// the default field switches), a request refused by a per-address limit,
// decided in process: the request flow's own cost a refusal, without the
// HTTP engine and the connection (gateway/edge's BenchmarkEdgeReject has
// those parts).
func BenchmarkServedReject(b *testing.B) {
	dir := b.TempDir()
	path := filepath.Join(dir, "floodgate.yaml")
	const src = `version: 1
server:
  admin_listen: "off"
  ops_listen: "off"
  headers: {ratelimit: true}
routes:
  - name: all
    match: {paths: ["/**"]}
    upstream: http://127.0.0.1:9
limits:
  - name: per-client
    rate: 1
    per: 1m
    burst: 1
    key: client_ip
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := newServer(ctx, &ServeOptions{Config: path, Listen: "127.0.0.1:0"}, log)
	if err != nil {
		b.Fatal(err)
	}
	defer s.close()
	if err := s.listen(io.Discard); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.shutdown(context.Background()) }()
	g := s.gateway.Load()
	peer := netip.MustParseAddr("192.0.2.1")
	r := &gateway.Request{Method: "GET", Host: "gateway.example", Path: "/x", Proto: "HTTP/1.1", Peer: peer,
		PeerText: peer.String(), Header: emptyHeader{}, NoOverride: true}
	g.Handle(ctx, r, gateway.HandleOptions{}).Done(0) // spends the burst
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h := g.Handle(ctx, r, gateway.HandleOptions{})
			if h.Status != 429 {
				b.Fatalf("status %d, want 429", h.Status)
			}
			h.Done(0)
		}
	})
}

// emptyHeader is a request without header fields.
type emptyHeader struct{}

func (emptyHeader) Get(string) string      { return "" }
func (emptyHeader) Values(string) []string { return nil }

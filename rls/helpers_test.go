package rls

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// frozenClock is a memstore clock the test moves by hand, so that window
// boundaries never fall inside a test.
type frozenClock struct{ ns atomic.Int64 }

func newClock() *frozenClock {
	c := &frozenClock{}
	// Ten seconds into a day: far from every window's end.
	c.ns.Store(time.Date(2026, 11, 30, 0, 0, 10, 0, time.UTC).UnixNano())
	return c
}
func (c *frozenClock) now() int64              { return c.ns.Load() }
func (c *frozenClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// startService serves cfg over a real TCP listener on 127.0.0.1 with an
// in-memory store on clock (nil: the system clock) and returns a client.
func startService(t *testing.T, cfg *Config, clock *frozenClock, opts Options) (rlsv3.RateLimitServiceClient, *Service) {
	t.Helper()
	return startServiceWith(t, cfg, clock, opts, limiter.Options{})
}

// startServiceWith is startService with the engine's options (an Observer).
func startServiceWith(t *testing.T, cfg *Config, clock *frozenClock, opts Options, lo limiter.Options) (rlsv3.RateLimitServiceClient, *Service) {
	t.Helper()
	mo := memstore.Options{SweepInterval: -1}
	if clock != nil {
		mo.Now = clock.now
	}
	st, err := memstore.New(mo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return serve(t, New(limiter.New(st, lo), cfg, opts), ServerOptions{})
}

func serve(t *testing.T, svc *Service, so ServerOptions) (rlsv3.RateLimitServiceClient, *Service) {
	t.Helper()
	srv, err := NewServer(svc, so)
	if err != nil {
		t.Fatal(err)
	}
	addr, stop, served := start(t, srv)
	conn := dial(t, addr)
	t.Cleanup(func() {
		conn.Close()
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return rlsv3.NewRateLimitServiceClient(conn), svc
}

// start serves srv on a free loopback port. stop ends serving (gracefully);
// served receives what Serve returned.
func start(t *testing.T, srv *Server) (addr string, stop context.CancelFunc, served <-chan error) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	return lis.Addr().String(), cancel, done
}

// dial opens a plaintext client connection to addr.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	c, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func ask(t *testing.T, c rlsv3.RateLimitServiceClient, domain string, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	return askN(t, c, domain, 0, ds...)
}

func askN(t *testing.T, c rlsv3.RateLimitServiceClient, domain string, hits uint32, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return r
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// header returns the value of a response header to add, "" if absent.
func header(r *rlsv3.RateLimitResponse, name string) string {
	for _, h := range r.GetResponseHeadersToAdd() {
		if h.GetKey() == name {
			return h.GetValue()
		}
	}
	return ""
}

// shadowDenials counts the shadow hits that denied, as the engine's
// Observer sees them.
func shadowDenials(n *atomic.Int64) limiter.Observer {
	return limiter.ObserverFunc(func(req *limiter.Request, res *limiter.Result) {
		for _, f := range res.Flags {
			if f&limiter.ShadowDenied != 0 {
				n.Add(1)
			}
		}
	})
}

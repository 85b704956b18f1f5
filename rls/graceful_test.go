package rls

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// slowEngine holds every decision until release is closed.
type slowEngine struct {
	limiter.Engine
	entered chan struct{}
	release chan struct{}
}

func (s *slowEngine) Decide(ctx context.Context, req *limiter.Request, res *limiter.Result) error {
	s.entered <- struct{}{}
	<-s.release
	return s.Engine.Decide(ctx, req, res)
}

// A call in flight when the server is told to stop still gets its answer.
func TestGracefulStopFinishesCallsInFlight(t *testing.T) {
	st, _ := memstore.New(memstore.Options{})
	defer st.Close()
	eng := &slowEngine{Engine: limiter.New(st, limiter.Options{}), entered: make(chan struct{}, 1), release: make(chan struct{})}
	srv, err := NewServer(New(eng, mustParse(t, basic), Options{}), ServerOptions{GracePeriod: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	addr, cancel, served := start(t, srv)
	conn := dial(t, addr)
	defer conn.Close()
	answered := make(chan error, 1)
	go func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		r, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(cctx,
			&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "g")}})
		if err == nil && r.OverallCode != ok {
			t.Errorf("answer %v", r)
		}
		answered <- err
	}()
	<-eng.entered // the call is inside the service
	cancel()      // stop serving
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) with a call in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(eng.release)
	if err := <-answered; err != nil {
		t.Fatalf("the call in flight failed: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

func TestRegisterOnAnotherServer(t *testing.T) {
	st, _ := memstore.New(memstore.Options{})
	defer st.Close()
	g := grpc.NewServer()
	New(limiter.New(st, limiter.Options{}), mustParse(t, basic), Options{}).Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	defer g.Stop()
	conn := dial(t, lis.Addr().String())
	defer conn.Close()
	if r := ask(t, rlsv3.NewRateLimitServiceClient(conn), "d", desc("user", "reg")); r.Statuses[0].LimitRemaining != 9 {
		t.Fatalf("%v", r)
	}
}

// Whatever the flow-control window, calls of any size are answered, many
// at once: requests far larger than a stream's window (their values count
// for nothing but the transport) and small ones beside them.
func TestServerWindowSizes(t *testing.T) {
	for _, win := range []int32{0, -1, 1, 70000, 4 << 20} {
		t.Run(strconv.Itoa(int(win)), func(t *testing.T) {
			st, _ := memstore.New(memstore.Options{})
			defer st.Close()
			srv, err := NewServer(New(limiter.New(st, limiter.Options{}), mustParse(t, basic), Options{}), ServerOptions{WindowSize: win})
			if err != nil {
				t.Fatal(err)
			}
			addr, cancel, served := start(t, srv)
			conn := dial(t, addr)
			defer conn.Close()
			c := rlsv3.NewRateLimitServiceClient(conn)
			big := strings.Repeat("v", 300<<10)
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Go(func() {
					v := "w" + strconv.Itoa(i)
					if i%2 == 0 {
						v += big
					}
					cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer ccancel()
					r, err := c.ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", v)}})
					if err != nil || r.OverallCode != ok || r.Statuses[0].LimitRemaining != 9 {
						t.Errorf("call %d: %v, %v", i, r, err)
					}
				})
			}
			wg.Wait()
			cancel()
			if err := <-served; err != nil {
				t.Fatalf("Serve: %v", err)
			}
		})
	}
}

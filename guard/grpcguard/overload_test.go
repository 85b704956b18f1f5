package grpcguard_test

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/gateway"
)

// adaptiveStat returns the state of the adaptive route's overload
// control (zero before a call reached it).
func adaptiveStat(e *echo) (s gateway.OverloadStat) {
	e.guard.Gateway().OverloadStats(func(o gateway.OverloadStat) {
		if o.Route == "adaptive" {
			s = o
		}
	})
	return s
}

// TestOverloadClientStreamPaceTeachesNothing: a client stream's handler
// waits on its client's messages at the client's pace, as an upstream
// waits on a slow upload's body: the adaptive limit must not learn that
// wait as the service's latency. Three clients that each send a message
// every 25 ms, beside fast unary calls on the same route, would read as
// a queueing service, cut the limit below the streams open and shed the
// fast calls.
func TestOverloadClientStreamPaceTeachesNothing(t *testing.T) {
	t.Parallel()
	const streams, rounds, messages, gap = 3, 20, 4, 25 * time.Millisecond
	e, conn := start(t)
	ctx := ctxWith(t)
	// The fast calls first, alone: the limit learns the service's own
	// latency.
	for deadline := time.Now().Add(15 * time.Second); adaptiveStat(e).NoLoad == 0 && time.Now().Before(deadline); {
		if _, _, err := say(ctx, conn, "Quick", "hi"); err != nil {
			t.Fatalf("a fast call alone: %v", err)
		}
	}
	if adaptiveStat(e).NoLoad == 0 {
		t.Fatal("the limit learnt no latency from the fast calls alone")
	}
	var shed, fast, maxLatency, slowestFast atomic.Int64
	minLimit := atomic.Int64{}
	minLimit.Store(int64(adaptiveStat(e).Limit))
	done := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { // fast unary calls, one every 10 ms
		defer bg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			began := time.Now()
			_, _, err := say(ctx, conn, "Quick", "hi")
			if d := int64(time.Since(began)); d > slowestFast.Load() {
				slowestFast.Store(d) // one goroutine writes it
			}
			switch {
			case status.Code(err) == codes.Unavailable:
				shed.Add(1)
			case err != nil:
				t.Errorf("a fast call: %v", err)
				return
			}
			fast.Add(1)
		}
	}()
	go func() { // the limit's lowest, and the highest latency of a window
		defer bg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			s := adaptiveStat(e)
			if n := int64(s.Limit); n < minLimit.Load() {
				minLimit.Store(n)
			}
			if d := int64(s.Latency); d > maxLatency.Load() {
				maxLatency.Store(d)
			}
		}
	}()
	var streamShed atomic.Int64
	for range rounds {
		var wg sync.WaitGroup
		for i := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, "/test.Echo/Drip")
				if err != nil {
					t.Errorf("stream %d: %v", i, err)
					return
				}
				for j := range messages {
					time.Sleep(gap)
					if err := st.SendMsg(wrapperspb.String(fmt.Sprint(j))); err != nil {
						break // the server ended the stream: RecvMsg tells why
					}
				}
				_ = st.CloseSend()
				out := new(wrapperspb.StringValue)
				switch err := st.RecvMsg(out); {
				case status.Code(err) == codes.Unavailable:
					streamShed.Add(1)
				case err != nil && err != io.EOF:
					t.Errorf("stream %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
	}
	close(done)
	bg.Wait()
	s := adaptiveStat(e)
	maxLatency.Store(max(maxLatency.Load(), int64(s.Latency)))
	t.Logf("%d fast calls (slowest %v), %d shed; %d streams shed; limit at least %d, latency at most %v; now %+v",
		fast.Load(), time.Duration(slowestFast.Load()), shed.Load(), streamShed.Load(), minLimit.Load(), time.Duration(maxLatency.Load()), s)
	if n := shed.Load(); n > 0 {
		t.Errorf("%d of %d fast calls shed beside %d streams sending a message every %v", n, fast.Load(), streams, gap)
	}
	// Generous bounds: a call takes 2 ms, a stream's client 100 ms; a
	// loaded machine's noise may halve the limit once or twice. A loaded
	// machine also stretches the fast calls themselves, as their clients
	// time them: a window's latency is the clients' pace only when it is
	// past both the gap and twice the slowest fast call.
	slowest := time.Duration(slowestFast.Load())
	if d := time.Duration(maxLatency.Load()); d >= gap && d >= 2*slowest {
		t.Errorf("a window's latency reached %v: the clients' pace (%v a stream) taken for the service's", d, messages*gap)
	}
	if n := minLimit.Load(); n < 4 {
		t.Errorf("the limit fell from 16 to %d, below the streams open and a fast call", n)
	}
}

// TestOverloadUnavailableIsADrop: a handler that answers UNAVAILABLE, its
// client still there, is a service that drops calls, as an upstream that
// answers 503: the adaptive limit is cut, and learns no latency from
// them.
func TestOverloadUnavailableIsADrop(t *testing.T) {
	t.Parallel()
	e, conn := start(t)
	ctx := ctxWith(t)
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		if _, _, err := say(ctx, conn, "Quick", "down"); status.Code(err) != codes.Unavailable {
			t.Fatalf("a call answered UNAVAILABLE: %v", err)
		}
		if adaptiveStat(e).Limit < 16 {
			break
		}
	}
	if s := adaptiveStat(e); s.Limit >= 16 || s.Latency != 0 || s.NoLoad != 0 {
		t.Errorf("after calls answered UNAVAILABLE: %+v; want the limit cut by drops, no latency learnt", s)
	}
}

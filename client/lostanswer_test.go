package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/client"
)

// loseOneAnswer forwards connections to backend (host:port) until t
// ends. Once armed is set, the first bytes the backend sends back on any
// connection are dropped and that connection is closed on both sides:
// the request they answer was served, but its answer never reaches the
// caller. It returns the proxy's address.
func loseOneAnswer(t *testing.T, backend string, armed *atomic.Bool) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		lis.Close()
		wg.Wait()
	})
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", backend)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, b)
			mu.Unlock()
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(b, c)
				b.Close()
			}()
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := b.Read(buf)
					if n > 0 && armed.CompareAndSwap(true, false) {
						b.Close()
						return
					}
					if n > 0 {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return lis.Addr().String()
}

// TestSettleWhoseAnswerWasLost: a Settle the service applied but whose
// answer was lost on the way (the connection broke as it came back) is
// sent again, as Settle documents, and the copy is answered as the first
// settle was: Settle returns that settlement, not ErrUnknownReservation,
// and the reservation is charged once.
func TestSettleWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(tokensAPI(t))
	t.Cleanup(ts.Close)
	var armed atomic.Bool
	hc := client.NewHTTP("http://"+loseOneAnswer(t, ts.Listener.Addr().String(), &armed), client.HTTPOptions{Timeout: 5 * time.Second})

	ctx := context.Background()
	res, err := hc.Reserve(ctx, time.Hour, client.Hit{Limit: "tokens", Key: "k", Cost: 800})
	if err != nil || !res.Allowed {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	armed.Store(true)
	st, err := res.Settle(ctx, 100)
	if armed.Load() {
		t.Fatal("the settle's answer was not dropped")
	}
	if err != nil {
		t.Fatalf("a settle the service applied, its answer lost and sent again: %v (unknown reservation: %v), want its settlement",
			err, errors.Is(err, client.ErrUnknownReservation))
	}
	if len(st.Limits) != 1 || st.Overrun != 0 || st.Limits[0].Remaining < 899 {
		t.Errorf("settlement %+v, want tokens with 900 left and no overrun", st)
	}
	if err := res.Cancel(ctx); err != nil {
		t.Errorf("cancel after the settle: %v", err)
	}
	if held := heldTokens(t, hc); held != 100 {
		t.Errorf("a reservation of 800 settled at 100 holds %d, want 100", held)
	}
}

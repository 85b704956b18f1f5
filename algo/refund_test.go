package algo

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate"
)

func TestRefund(t *testing.T) {
	t.Parallel()
	sec := int64(time.Second)
	for _, alg := range []floodgate.Algorithm{floodgate.TokenBucket, floodgate.GCRA, floodgate.LeakyBucket} {
		p, err := Compile(&floodgate.Limit{Algorithm: alg, Rate: 3, Per: time.Second, Burst: 5})
		if err != nil {
			t.Fatal(err)
		}
		var s State
		for i := 0; i < 5; i++ {
			if d, _ := p.Decide(&s, Request{Now: sec, Cost: 1}); !d.Allowed {
				t.Fatalf("%s: request %d denied", alg, i)
			}
		}
		if d, _ := p.Decide(&s, Request{Now: sec, Cost: 1, Peek: true}); d.Allowed {
			t.Fatalf("%s: empty bucket allows", alg)
		}
		// Give two back: exactly two fit again, not a third.
		if err := p.Refund(&s, sec, 2); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if d, _ := p.Decide(&s, Request{Now: sec, Cost: 1}); !d.Allowed {
				t.Fatalf("%s: refunded unit %d denied", alg, i)
			}
		}
		if d, _ := p.Decide(&s, Request{Now: sec, Cost: 1, Peek: true}); d.Allowed {
			t.Fatalf("%s: more than the refund came back", alg)
		}
		// A refund never fills beyond full.
		if err := p.Refund(&s, sec, 5); err != nil {
			t.Fatal(err)
		}
		if err := p.Refund(&s, sec, 5); err != nil {
			t.Fatal(err)
		}
		if d, _ := p.Decide(&s, Request{Now: sec, Cost: 5, Peek: true}); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("%s: after refunds: %+v, want exactly a full bucket", alg, d)
		}
		if err := p.Refund(&s, sec, 0); err != floodgate.ErrInvalidCost {
			t.Errorf("%s: cost 0: %v", alg, err)
		}
	}
}

// TestRefundQueue frees the place of a queued request: the next arrival
// takes its slot and the same delay.
func TestRefundQueue(t *testing.T) {
	t.Parallel()
	p, err := Compile(&floodgate.Limit{Algorithm: floodgate.LeakyQueue, Rate: 1, Per: time.Second, Burst: 2})
	if err != nil {
		t.Fatal(err)
	}
	var s State
	var delays []time.Duration
	for i := 0; i < 3; i++ {
		d, _ := p.Decide(&s, Request{Now: 0, Cost: 1})
		if !d.Allowed {
			t.Fatalf("request %d refused", i)
		}
		delays = append(delays, d.Delay)
	}
	if d, _ := p.Decide(&s, Request{Now: 0, Cost: 1, Peek: true}); d.Allowed {
		t.Fatal("full queue accepts")
	}
	// The last one (delayed 2 s) goes away: a newcomer gets its slot.
	if err := p.Refund(&s, 0, 1); err != nil {
		t.Fatal(err)
	}
	d, _ := p.Decide(&s, Request{Now: 0, Cost: 1})
	if !d.Allowed || d.Delay != delays[2] {
		t.Fatalf("after the refund: %+v, want allowed with delay %s", d, delays[2])
	}
}

func TestRefundOtherAlgorithmsKeepState(t *testing.T) {
	t.Parallel()
	p, err := Compile(&floodgate.Limit{Algorithm: floodgate.FixedWindow, Max: 2, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var s State
	p.Decide(&s, Request{Now: 1, Cost: 2})
	before := s
	if floodgate.FixedWindow.Traits().Refundable {
		t.Fatal("fixed window claims to be refundable")
	}
	if err := p.Refund(&s, 1, 1); err != nil || s != before {
		t.Fatalf("refund changed a fixed window: %v %+v", err, s)
	}
}

package rls

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A ShouldRateLimit is one engine call: quota mode is atomic, and a check
// (hits_addend 0) is decided in the request's order with the charges.

// TestQuotaModeAtomic sends 100 concurrent requests with two descriptors
// in quota mode, 5 a minute each, and a third one outside it (1,000 a
// minute): a request goes ahead while one of the two has room, and the
// third counts exactly the requests that went ahead. (Deciding with a first
// look and then a charge, a request could see room at the look and none at
// the charge: refused, with the third descriptor charged all the same.)
func TestQuotaModeAtomic(t *testing.T) {
	everywhere(t, Minute, func(r *run) error {
		if r.compat {
			return nil // quota mode is Floodgate's
		}
		c := r.start(`
domain: q
descriptors:
  - key: a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 1000}
`, Options{})
		var ok atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for range 25 {
			wg.Go(func() {
				for range 4 {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					resp, err := c.ShouldRateLimit(ctx, req("q", desc("a", "x"), desc("b", "x"), desc("c", "x")))
					cancel()
					if err != nil {
						errs <- err
						return
					}
					if resp.OverallCode == rlsv3.RateLimitResponse_OK {
						ok.Add(1)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			return err
		}
		look := desc("c", "x")
		look.HitsAddend = wrapperspb.UInt64(0)
		left := r.ask(c, req("q", look)).Statuses[0].LimitRemaining
		if ok.Load() != 5 || left != 1000-5 {
			return fmt.Errorf("100 concurrent requests on two quota-mode limits of 5: %d OK and %d charged to the third descriptor, want exactly 5 and 5",
				ok.Load(), 1000-left)
		}
		return nil
	})
}

// TestCompatCheckInOrder: in compatibility mode the descriptors of a
// request count in their order, as envoyproxy/ratelimit pipelines its
// INCRBYs: a read (hits_addend 0) before a charge of the same counter does
// not see it, one after it does.
func TestCompatCheckInOrder(t *testing.T) {
	everywhere(t, Minute, func(r *run) error {
		if !r.compat {
			return nil
		}
		c := r.start("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n", Options{})
		read := desc("k", "v")
		read.HitsAddend = wrapperspb.UInt64(0)
		// The peer's answers: a read, then a charge of the same counter
		// (0 then 1 counted), then a charge and a read (2 and 2).
		for i, c2 := range []struct {
			first, second uint32
			req           *rlsv3.RateLimitRequest
		}{
			{3, 2, req("d", read, desc("k", "v"))},
			{1, 1, req("d", desc("k", "v"), read)},
		} {
			resp := r.ask(c, c2.req)
			if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != c2.first || resp.Statuses[1].LimitRemaining != c2.second {
				return fmt.Errorf("request %d: %v, want OK with %d then %d left", i+1, resp, c2.first, c2.second)
			}
		}
		return nil
	})
}

// TestCompatGlobalQuotaModeCountsEveryDescriptor: with the global
// QUOTA_MODE, envoyproxy/ratelimit puts every descriptor that is not
// unlimited in quota mode, those without a limit and those with a limit
// given in the request included: a request is over the limit only when
// every one of them is, so never when one has no limit. Its answers,
// run by hand on limits of one an hour:
//
//	k=v, k=v        OK, then OVER_LIMIT
//	k=v | x=y       OK   [OVER_LIMIT, OK]  (x has no limit)
//	k=v | j=w       OK   [OVER_LIMIT, OK]
//	j=w | x=y       OK   [OVER_LIMIT, OK]
func TestCompatGlobalQuotaModeCountsEveryDescriptor(t *testing.T) {
	everywhere(t, Hour, func(r *run) error {
		if !r.compat {
			return nil
		}
		c := r.start("domain: q\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - key: j\n    rate_limit: {unit: hour, requests_per_unit: 1}\n", Options{QuotaMode: true})
		for i, c2 := range []struct {
			req   *rlsv3.RateLimitRequest
			code  rlsv3.RateLimitResponse_Code
			codes []rlsv3.RateLimitResponse_Code
		}{
			{req("q", desc("k", "v")), rlsv3.RateLimitResponse_OK, []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK}},
			{req("q", desc("k", "v")), rlsv3.RateLimitResponse_OVER_LIMIT, []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OVER_LIMIT}},
			{req("q", desc("k", "v"), desc("x", "y")), rlsv3.RateLimitResponse_OK, []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OK}},
			{req("q", desc("k", "v"), desc("j", "w")), rlsv3.RateLimitResponse_OK, []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OK}},
			{req("q", desc("j", "w"), desc("x", "y")), rlsv3.RateLimitResponse_OK, []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OK}},
		} {
			resp := r.ask(c, c2.req)
			if resp.OverallCode != c2.code {
				return fmt.Errorf("request %d: %v, want %v", i+1, resp, c2.code)
			}
			for j, st := range resp.Statuses {
				if st.Code != c2.codes[j] {
					return fmt.Errorf("request %d, descriptor %d: %v, want %v", i+1, j, st, c2.codes[j])
				}
			}
		}
		return nil
	})
}

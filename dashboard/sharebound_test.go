package dashboard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestShareKeepsEveryCountPastMaxSeries: an instance whose policy has
// more limits than get a series publishes MaxSeries limits, "other" and
// "all"; another instance sharing its Redis sees every one of its
// decisions, in "all" and in exactly one limit's series or "other".
func TestShareKeepsEveryCountPastMaxSeries(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	const limits = MaxSeries + 8
	rules := make([]*limiter.Rule, limits)
	for i := range rules {
		rules[i] = ruletest.Rule(t, bucket(fmt.Sprintf("limit-%03d", i)))
	}
	now := time.Now().Unix()
	var recs [2]*Recorder
	var shares [2]*Share
	for i := range recs {
		recs[i] = NewRecorder(now)
		c, err := redisconn.Open("redis://" + rs.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		shares[i] = NewShare(c, fmt.Sprintf("i%d", i), recs[i], func() Instance { return Instance{Version: "v1"} }, nil)
	}
	for _, r := range rules {
		decide(recs[1], []*limiter.Rule{r}, "ip:1", false)
	}
	for _, r := range recs {
		r.Tick(now + 1)
	}
	ctx := context.Background()
	for _, s := range []*Share{shares[1], shares[0]} {
		if err := s.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	local := recs[0].Counts(now-1, now)
	shares[0].addRemote(local, now-1, now)
	if got := local["all"][0].Decisions; got != limits {
		t.Errorf("the deployment's decisions read %d, want %d", got, limits)
	}
	var sum uint64
	for name, pts := range local {
		if name != "all" {
			sum += pts[0].Decisions
		}
	}
	if sum != limits {
		t.Errorf("the limits' series sum to %d decisions, want %d (other: %v)", sum, limits, local["other"])
	}
	if n := len(local); n > MaxSeries+2 {
		t.Errorf("%d series, more than %d limits, other and all", n, MaxSeries)
	}
}

// TestShareKeepsCountsOfInstancesApart: an instance whose recorder is
// a second or a few ahead of this one's (clocks a little apart, or their
// tickers turning at different moments) publishes its last ShareSeconds
// seconds ending later; its decisions stay in this instance's history
// once they are final, counted once. So do those of an instance a few
// seconds behind.
func TestShareKeepsCountsOfInstancesApart(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	rule := ruletest.Rule(t, bucket("a"))
	for _, ahead := range []int64{1, 3, 0, -1, -5} {
		now := time.Now().Unix()
		var recs [2]*Recorder
		var shares [2]*Share
		for i := range recs {
			recs[i] = NewRecorder(now + int64(i)*ahead)
			c, err := redisconn.Open("redis://" + rs.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if i == 0 { // forget the instances of the rounds before
				if err := c.Do(context.Background(), c.B().Flushall().Build()).Error(); err != nil {
					t.Fatal(err)
				}
			}
			id := fmt.Sprintf("ahead%d-i%d", ahead, i)
			shares[i] = NewShare(c, id, recs[i], func() Instance { return Instance{Version: "v1"} }, nil)
		}
		for range 5 {
			decide(recs[1], []*limiter.Rule{rule}, "ip:1", false)
		}
		ctx := context.Background()
		for k := int64(1); k <= 2*ShareSeconds; k++ {
			recs[0].Tick(now + k)
			recs[1].Tick(now + ahead + k)
			for _, s := range []*Share{shares[1], shares[0]} {
				if err := s.Sync(ctx); err != nil {
					t.Fatal(err)
				}
			}
			until := now + k - 1
			local := recs[0].Counts(until-Window, until)
			shares[0].addRemote(local, until-Window, until)
			var sum uint64
			for _, p := range local["all"] {
				sum += p.Decisions
			}
			if k > max(ahead, 0)+1 && sum != 5 {
				t.Fatalf("another instance %d s ahead, %d s on: the deployment's history holds %d decisions, want 5", ahead, k, sum)
			}
		}
	}
}

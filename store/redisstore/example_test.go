package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
	"github.com/floodgate/floodgate/store/redisstore"
)

func ExampleParseURL() {
	for _, u := range []string{
		"redis://:secret@10.0.0.5:6379/2",
		"redis+cluster://10.0.0.1:7000,10.0.0.2:7000",
		"redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster",
	} {
		a, err := redisstore.ParseURL(u)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%s %v db=%d master=%q\n", a.Mode, a.Hosts, a.DB, a.MasterSet)
	}
	// Output:
	// standalone [10.0.0.5:6379] db=2 master=""
	// cluster [10.0.0.1:7000 10.0.0.2:7000] db=0 master=""
	// sentinel [10.0.0.1:26379 10.0.0.2:26379] db=0 master="mymaster"
}

// A limiter whose counts live in Redis, with a 5 ms deadline per decision
// and the embedded store as the fallback of limits with the local policy.
func ExampleNew() {
	store, err := redisstore.New(redisstore.Options{URL: "redis://127.0.0.1:6379", Prefix: "myapp:"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	local, _ := memstore.New(memstore.Options{})
	defer local.Close()
	lim := limiter.New(store, limiter.Options{Timeout: 5 * time.Millisecond, Local: local, Instances: 4})

	perUser, _ := limiter.NewRule(floodgate.Limit{Name: "per_user", Algorithm: floodgate.TokenBucket,
		Rate: 10, Per: time.Second, Burst: 20}, floodgate.FailLocal, false)
	res, err := lim.Check(context.Background(), []limiter.Hit{{Rule: perUser, Key: "user:42", Cost: 1}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Allowed, res.Decisions[0].Remaining)
}

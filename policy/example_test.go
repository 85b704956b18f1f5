package policy_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memstore"
)

func ExamplePolicy_Match() {
	f, err := config.Load("../examples/school.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	store, _ := memstore.New(memstore.Options{})
	defer store.Close()
	engine := limiter.New(store, limiter.Options{})

	req := &policy.Request{
		Method:   "GET",
		Path:     "/partner/students/9",
		ClientIP: netip.MustParseAddr("198.51.100.7"),
		APIKey:   "key-partner-1", // the example's demo key
	}
	var m policy.Match
	for range 3 {
		p.Match(req, &m)
		if m.Forbidden {
			fmt.Println(403)
			continue
		}
		res, _ := engine.Check(context.Background(), m.Hits)
		if res.Allowed {
			fmt.Println(200, m.Route.Name, m.Plan)
		} else {
			fmt.Println(429, m.Limits[res.Binding].Name)
		}
	}
	req.APIKey = "not-a-key"
	p.Match(req, &m)
	fmt.Println("unknown key forbidden:", m.Forbidden)
	// Output:
	// 200 partner-students partner-basic
	// 200 partner-students partner-basic
	// 429 partner-basic.rate
	// unknown key forbidden: true
}

func ExampleReloader() {
	rl, err := policy.NewReloader(policy.ReloaderOptions{Path: "../examples/school.yaml"})
	if err != nil {
		fmt.Println(err)
		return
	}
	// The caller runs rl.Run(ctx) to follow the file and calls rl.Reload()
	// on SIGHUP; Policy always returns a complete, valid policy.
	l, _ := rl.Policy().Limit("stage.dev")
	fmt.Println(l.Name, l.Kind, l.Rule.Limit().Rate, l.Rule.Limit().Burst)
	// Output:
	// stage.dev rate 5 5
}

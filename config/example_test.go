package config_test

import (
	"fmt"

	"github.com/floodgate/floodgate/config"
)

func ExampleParse() {
	f, err := config.Parse("office.yaml", []byte(`
stages:
  - name: dev
    rate: 5
    burst: 5
plans:
  - name: partner-basic
    rate: 2
    burst: 2
    quota: {limit: 1000, period: DAY, time_zone: Asia/Kolkata}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	dev := f.Stages[0].Compiled
	fmt.Println(dev.Algorithm, dev.Rate, dev.Per, dev.Burst)
	q := f.Plans[0].QuotaLimit
	fmt.Println(q.Name, q.Max, q.Period, q.Location)
	// Output:
	// token_bucket 5 1s 5
	// partner-basic.quota 1000 day Asia/Kolkata
}

func ExampleErrors() {
	_, err := config.Parse("bad.yaml", []byte(`
limits:
  - name: login
    rate: 5
    per: 1 minute
    brust: 5
`))
	fmt.Println(err)
	// Output:
	// bad.yaml:5:10: limits[0].per: bad duration "1 minute": want a non-negative Go duration such as 500ms, 30s, 5m or 24h
	// bad.yaml:6:5: limits[0].brust: unknown field (did you mean "burst"?)
}

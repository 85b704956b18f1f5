package accesslog_test

import (
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/floodgate/floodgate/accesslog"
)

func ExampleLogger() {
	l, err := accesslog.New(accesslog.Options{Out: os.Stdout, Format: accesslog.FormatJSON})
	if err != nil {
		fmt.Println(err)
		return
	}
	l.Log(&accesslog.Record{
		Time:     time.Date(2026, 11, 30, 10, 0, 0, 250_000_000, time.UTC),
		ClientIP: netip.MustParseAddr("203.0.113.7"),
		Method:   "GET",
		Path:     "/partner/students/9",
		Status:   200,
		Bytes:    31,
		Duration: 1500 * time.Microsecond,
		Key:      "partner-1", // the key's name, never the key
		Route:    "partner-students",
		Limit:    "partner-basic.rate",
		Decision: accesslog.Allow,
	})
	l.Close() // writes out what is buffered
	// Output:
	// {"time":"2026-11-30T10:00:00.250000Z","ip":"203.0.113.7","method":"GET","path":"/partner/students/9","status":200,"bytes":31,"duration_us":1500,"route":"partner-students","key":"partner-1","limit":"partner-basic.rate","decision":"allow"}
}

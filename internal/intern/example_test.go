package intern_test

import (
	"fmt"

	"github.com/floodgate/floodgate/internal/intern"
)

func ExampleTable() {
	keys := intern.New(1024)
	buf := []byte("ip:")
	buf = append(buf, "192.0.2.1"...)
	a := keys.String(buf) // stored
	b := keys.String(buf) // the same string, not a new one
	fmt.Println(a, a == b)
	// Output: ip:192.0.2.1 true
}

package replay

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestTopClientsExactThenBounded attacks the counts of the clients a
// replay reports refused most, which it keeps in bounded memory: they are
// exact while at most 512 clients are refused, and past that each count
// is an upper bound, shown with "≤", that the client's true count is
// within its error of. 512 clients refused once to three times are listed
// with their exact counts and no bound; then one client refused 50 times
// and 600 refused once each: the first keeps its exact count at the top,
// and every count listed is within its bound.
func TestTopClientsExactThenBounded(t *testing.T) {
	t.Parallel()
	p := compilePolicy(t, `
limits:
  - {name: once, algorithm: sliding_log, limit: 1, window: 1h, key: client_ip}
`)
	ip := func(i int) string { return fmt.Sprintf("10.0.%d.%d", i/250, 1+i%250) }
	run := func(refused map[string]int, order []string) (*Report, string) {
		var reqs []req
		at := time.Duration(0)
		for _, c := range order {
			for range 1 + refused[c] {
				reqs = append(reqs, req{at: at, ip: c})
				at += time.Millisecond
			}
		}
		r := mustRun(t, Options{Policy: p, Logs: []string{writeLog(t, t.TempDir(), "a.log", reqs)}, Top: 1000})
		var text bytes.Buffer
		if err := r.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		return r, text.String()
	}

	exact, order := map[string]int{}, []string(nil)
	for i := range 512 {
		exact[ip(i)] = 1 + i%3
		order = append(order, ip(i))
	}
	r, text := run(exact, order)
	if len(r.TopClients) != 512 || strings.Contains(text, "≤") {
		t.Errorf("512 clients refused: %d listed, bounds shown: %v", len(r.TopClients), strings.Contains(text, "≤"))
	}
	for _, a := range r.TopClients {
		if a.Denied != int64(exact[a.Name]) || a.Error != 0 {
			t.Errorf("512 clients refused: %s listed with %d (error %d), refused %d", a.Name, a.Denied, a.Error, exact[a.Name])
		}
	}

	heavy := "192.0.2.50"
	bounded, order := map[string]int{heavy: 50}, []string{heavy}
	for i := range 600 {
		bounded[ip(i)] = 1
		order = append(order, ip(i))
	}
	r, text = run(bounded, order)
	if len(r.TopClients) == 0 || r.TopClients[0].Name != heavy || r.TopClients[0].Denied != 50 || r.TopClients[0].Error != 0 {
		t.Fatalf("601 clients refused: the top is %+v, want %s refused exactly 50 times", r.TopClients[0], heavy)
	}
	if !strings.Contains(text, "≤") {
		t.Errorf("601 clients refused: no bound shown in\n%s", text)
	}
	for _, a := range r.TopClients {
		if n := int64(bounded[a.Name]); a.Denied < n || a.Denied-a.Error > n {
			t.Errorf("601 clients refused: %s listed with %d (error %d), refused %d", a.Name, a.Denied, a.Error, n)
		}
	}
}

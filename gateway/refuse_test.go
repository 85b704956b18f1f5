package gateway

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestPlainTargetsPassEveryTargetCheck holds Preflight's shortcut: a
// target plainOriginTarget takes is one that none of targetAnswer's checks
// would refuse, whatever the method. Targets are drawn from bytes that
// those checks read ('%', ';', '#', '.', '/', ':', '@', '[', ']', '?',
// escapes of a slash, a dot and a ';', a scheme's letters), so that most
// are not plain and every check is met by some.
func TestPlainTargetsPassEveryTargetCheck(t *testing.T) {
	pieces := []string{"/", "/", ".", "..", "%", "%2F", "%2e", "%3B", "%zz", ";", ";x", "#", "?", "?q=1",
		":", "://", "@", "[", "]", "http", "h", "a", "Z", "0", "-", "~", "*", " "}
	rng := rand.New(rand.NewPCG(1, 2))
	plain := 0
	refused := map[string]bool{} // the checks met by targets that are not plain
	for range 200000 {
		var b strings.Builder
		if rng.IntN(4) > 0 {
			b.WriteByte('/')
		}
		for n := rng.IntN(8); n >= 0; n-- {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		target := b.String()
		for _, method := range []string{"GET", "OPTIONS"} {
			status, text, _ := targetAnswer(method, target)
			if !plainOriginTarget(target) {
				if status >= 400 {
					refused[text] = true
				}
				continue
			}
			if status != 0 {
				t.Fatalf("plain target %q, %s: targetAnswer says %d %q", target, method, status, text)
			}
		}
		if !plainOriginTarget(target) {
			continue
		}
		plain++
		for _, http11 := range []bool{false, true} {
			for _, host := range []string{"", "gateway.example"} {
				status, _, _ := Preflight("GET", target, host, http11)
				want := 0
				if http11 && host == "" {
					want = 400 // no Host: the one check left
				}
				if status != want {
					t.Fatalf("Preflight(GET, %q, %q, %v) = %d, want %d", target, host, http11, status, want)
				}
			}
		}
	}
	if plain < 1000 || len(refused) < 8 {
		t.Fatalf("%d plain targets drawn, and %d of targetAnswer's eight refusals met by the others: too few to tell",
			plain, len(refused))
	}
}

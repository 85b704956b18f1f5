package redisstore

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// TestScriptAlgorithmIDs holds the algorithm ids written in the scripts
// equal to Go's floodgate.Algorithm values, and their rate family to the
// algorithms' traits, so that reordering the Go enum cannot silently send
// an algorithm's state to another algorithm's code.
func TestScriptAlgorithmIDs(t *testing.T) {
	table := regexp.MustCompile(`(?s)local ALG = \{(.*?)\}`)
	pair := regexp.MustCompile(`(\w+) = (\d+)`)
	rate := regexp.MustCompile(`local RATE = \{(.*?)\}\n`)
	member := regexp.MustCompile(`\[ALG\.(\w+)\] = true`)
	for name, src := range map[string]string{"apply.lua": applySource, "refund.lua": refundSource} {
		m := table.FindStringSubmatch(src)
		if m == nil {
			t.Fatalf("%s: no ALG table", name)
		}
		seen := map[floodgate.Algorithm]bool{}
		for _, p := range pair.FindAllStringSubmatch(m[1], -1) {
			a, err := floodgate.ParseAlgorithm(p[1])
			if err != nil {
				t.Errorf("%s: ALG.%s is not an algorithm: %v", name, p[1], err)
				continue
			}
			id, _ := strconv.Atoi(p[2])
			if id != int(a) {
				t.Errorf("%s: ALG.%s = %d, Go's floodgate.Algorithm is %d", name, p[1], id, a)
			}
			seen[a] = true
		}
		for _, a := range floodgate.Algorithms() {
			if !seen[a] {
				t.Errorf("%s: ALG has no id for %s", name, a)
			}
		}
		rm := rate.FindStringSubmatch(src)
		if rm == nil {
			t.Fatalf("%s: no RATE set", name)
		}
		inRate := map[string]bool{}
		for _, p := range member.FindAllStringSubmatch(rm[1], -1) {
			inRate[p[1]] = true
		}
		for _, a := range floodgate.Algorithms() {
			if want := a.Family() == floodgate.FamilyRate; inRate[a.String()] != want {
				t.Errorf("%s: RATE[%s] = %v, want %v (its family)", name, a, inRate[a.String()], want)
			}
		}
	}
}

// TestSettledTTLInScript holds how long the script keeps a settled
// record equal to limiter.SettledTTL.
func TestSettledTTLInScript(t *testing.T) {
	m := regexp.MustCompile(`local SETTLED_MS = (\d+)\n`).FindStringSubmatch(applySource)
	if m == nil {
		t.Fatal("apply.lua: no SETTLED_MS")
	}
	if ms, _ := strconv.Atoi(m[1]); time.Duration(ms)*time.Millisecond != limiter.SettledTTL {
		t.Errorf("apply.lua: SETTLED_MS = %s ms, limiter.SettledTTL is %v", m[1], limiter.SettledTTL)
	}
}

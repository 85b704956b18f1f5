package rls

import "testing"

// The same descriptor twice in one request counts twice, all or nothing.
func TestSameDescriptorTwiceCountsTwice(t *testing.T) {
	c, _ := startService(t, mustParse(t, basic), newClock(), Options{})
	r := ask(t, c, "d", desc("user", "twice"), desc("user", "twice"))
	if r.OverallCode != ok {
		t.Fatalf("%v", r)
	}
	if r = ask(t, c, "d", desc("user", "twice")); r.Statuses[0].LimitRemaining != 7 {
		t.Fatalf("after a request with the descriptor twice and one with it once: %v, want 7 left", r)
	}
	// 7 left: a request carrying it 4 times at cost 2 (8 units) is denied
	// and takes nothing.
	if r = askN(t, c, "d", 2, desc("user", "twice"), desc("user", "twice"), desc("user", "twice"), desc("user", "twice")); r.OverallCode != over {
		t.Fatalf("8 units of 7: %v", r)
	}
	if r = ask(t, c, "d", desc("user", "twice")); r.Statuses[0].LimitRemaining != 6 {
		t.Fatalf("the denied request took something: %v", r)
	}
}

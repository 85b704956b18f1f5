package redisstore

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// TestKeySlotIsTheKeysSlot: keySlot finds the slot of a key without
// making it, for every kind of subject and prefix.
func TestKeySlotIsTheKeysSlot(t *testing.T) {
	r := ruletest.Rule(t, floodgate.Limit{Name: "w", Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Minute})
	subjects := []string{"", "u", "user-42", "}x", "a}b", "a{b}c", "{", "}", "{}", "x}", "é", "sha256:0123456789abcdef"}
	for _, prefix := range []string{"", "fg:", "app{1}:", "a{", "}"} {
		s := &Store{prefix: prefix}
		for _, sub := range subjects {
			if got, want := s.keySlot(r, sub), slot(s.Key(r, sub)); got != want {
				t.Errorf("prefix %q subject %q: slot %d, want %d (of %q)", prefix, sub, got, want, s.Key(r, sub))
			}
		}
	}
}

// TestPartition: the node of the hits' slots, as the slot map names it;
// none for hits on several nodes, for a slot no node serves, before the
// map was read, and outside a Cluster.
func TestPartition(t *testing.T) {
	r := ruletest.Rule(t, floodgate.Limit{Name: "w", Algorithm: floodgate.FixedWindow, Max: 10, Window: time.Minute})
	s := &Store{prefix: "fg:", replies: newReplies(Address{Mode: Cluster})}
	hit := func(k string) limiter.Hit { return limiter.Hit{Rule: r, Key: k, Cost: 1} }
	if p, ok := s.Partition([]limiter.Hit{hit("a")}); ok {
		t.Fatalf("before the slot map: %q, want none", p)
	}
	// Two nodes, the first serves the slot of "a", the second every
	// other slot but that of "c".
	m := &slotMap{read: time.Now(), addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379"}}
	for sl := range m.owner {
		m.owner[sl] = 2
	}
	sa, sc := s.keySlot(r, "a"), s.keySlot(r, "c")
	m.owner[sa], m.owner[sc] = 1, 0
	s.replies.slots.Store(m)
	b := "b"
	for s.keySlot(r, b) == sa || s.keySlot(r, b) == sc {
		b += "b"
	}
	for _, c := range []struct {
		keys []string
		want string
	}{
		{[]string{"a"}, "10.0.0.1:6379"},
		{[]string{"a", "a"}, "10.0.0.1:6379"},
		{[]string{b}, "10.0.0.2:6379"},
		{[]string{"a", b}, ""},
		{[]string{"c"}, ""},
		{nil, ""},
	} {
		hits := make([]limiter.Hit, len(c.keys))
		for i, k := range c.keys {
			hits[i] = hit(k)
		}
		if p, ok := s.Partition(hits); p != c.want || ok != (c.want != "") {
			t.Errorf("%q: %q, %v; want %q", c.keys, p, ok, c.want)
		}
	}
	// A failure on a slot names its node, as Partition does.
	errDown := errors.New("down")
	var pe *limiter.PartitionError
	if h := hit(b); !errors.As(s.nodeErr(&h, errDown), &pe) || pe.Partition != "10.0.0.2:6379" || !errors.Is(pe, errDown) {
		t.Errorf("failure on %q: %v, want one naming 10.0.0.2:6379", b, pe)
	}
	if h := hit("c"); errors.As(s.nodeErr(&h, errDown), &pe) {
		t.Errorf("failure on a slot no node serves names %q", pe.Partition)
	}
	if n := testing.AllocsPerRun(100, func() { s.Partition([]limiter.Hit{hit("a")}) }); n != 0 {
		t.Errorf("%v allocations per Partition, want 0", n)
	}
	standalone := &Store{prefix: "fg:", replies: newReplies(Address{Mode: Standalone})}
	if p, ok := standalone.Partition([]limiter.Hit{hit("a")}); ok {
		t.Fatalf("standalone: %q, want none (the shared breaker)", p)
	}
	if p, ok := (&Store{}).Partition([]limiter.Hit{hit("a")}); ok {
		t.Fatalf("NewFromClient: %q, want none", p)
	}
}

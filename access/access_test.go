package access

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/redisconn"
	"github.com/floodgate/floodgate/internal/redistest"
)

// TestListLookups: deny and allow answer by the longest matching network,
// IPv4-mapped addresses as IPv4, and API entries join the file's.
func TestListLookups(t *testing.T) {
	f, err := config.Parse("a.yaml", []byte(`
server:
  access:
    deny: [203.0.113.0/24, "2001:db8:bad::/48"]
    allow: [{networks: [10.0.0.0/8], exempt: [l1]}, {networks: [10.1.0.0/16], exempt: [all]}]
limits: [{name: l1, rate: 1}]
`))
	if err != nil {
		t.Fatal(err)
	}
	ls := New(&f.Server.Access, nil, 0, nil)
	defer ls.Close()
	a := netip.MustParseAddr
	l := ls.List()
	for addr, want := range map[string]bool{"203.0.113.9": true, "::ffff:203.0.113.9": true, "203.0.114.1": false,
		"2001:db8:bad:1::1": true, "2001:db8:bae::1": false} {
		if got := l.Denied(a(addr)); got != want {
			t.Errorf("denied(%s) = %v", addr, got)
		}
	}
	if all, names := l.Exempt(a("10.2.3.4")); all || len(names) != 1 || names[0] != "l1" {
		t.Errorf("10.2.3.4: %v %v", all, names)
	}
	if all, _ := l.Exempt(a("10.1.3.4")); !all {
		t.Error("10.1.3.4: the longer network exempts from all")
	}
	if all, names := l.Exempt(a("11.0.0.1")); all || names != nil {
		t.Error("11.0.0.1 exempt")
	}
	ctx := context.Background()
	if _, err := ls.Add(ctx, Entry{List: Deny, Network: netip.MustParsePrefix("198.51.100.7/32")}); err != nil {
		t.Fatal(err)
	}
	if !ls.List().Denied(a("198.51.100.7")) {
		t.Error("API entry not in force")
	}
	if err := ls.Remove(ctx, Deny, netip.MustParsePrefix("203.0.113.0/24")); !errors.Is(err, ErrFromFile) {
		t.Errorf("removing a file entry: %v", err)
	}
	if err := ls.Remove(ctx, Deny, netip.MustParsePrefix("198.51.100.7/32")); err != nil || ls.List().Denied(a("198.51.100.7")) {
		t.Errorf("remove: %v", err)
	}
}

func BenchmarkDenied(b *testing.B) {
	var es []Entry
	for i := range 10000 {
		es = append(es, Entry{List: Deny, Network: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)})
	}
	l := Compile(es)
	addr := netip.MustParseAddr("192.0.2.1")
	b.ReportAllocs()
	for b.Loop() {
		l.Denied(addr)
	}
}

// TestAddRefusesBadNetworks: an entry added through Lists.Add whose
// network no address could match as written (host bits set, IPv4-mapped,
// none at all) is refused with an error naming it, rather than kept as a
// deny entry that denies nothing; on Redis, an entry without a network
// would make every instance fail to read the lists, so that no later
// entry came into force.
func TestAddRefusesBadNetworks(t *testing.T) {
	srv := redistest.Start(t)
	c, err := redisconn.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ls := New(&config.Access{MaxEntries: 100}, NewRedis(c), time.Hour, nil)
	defer ls.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		network netip.Prefix
		want    string
	}{
		{netip.MustParsePrefix("198.51.100.7/24"), "198.51.100.0/24"},
		{netip.MustParsePrefix("::ffff:198.51.100.0/120"), "IPv4"},
		{netip.Prefix{}, "needs a network"},
	} {
		_, err := ls.Add(ctx, Entry{List: Deny, Network: tc.network})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Add(deny %v) = %v, want an error saying %q", tc.network, err, tc.want)
		}
	}
	if _, err := ls.Add(ctx, Entry{List: Deny, Network: netip.MustParsePrefix("203.0.113.0/24")}); err != nil {
		t.Fatalf("a good entry after the bad ones: %v", err)
	}
	if !ls.List().Denied(netip.MustParseAddr("203.0.113.9")) {
		t.Error("a good entry added after the bad ones is not in force")
	}
}

// TestAddAtTheBound: at max_entries, an API entry can still be replaced
// (its exempt list changed), and lists made without a bound take the
// default one rather than refusing every entry as full.
func TestAddAtTheBound(t *testing.T) {
	ctx := context.Background()
	ls := New(&config.Access{MaxEntries: 1}, nil, 0, nil)
	defer ls.Close()
	n := netip.MustParsePrefix("10.0.0.0/8")
	if _, err := ls.Add(ctx, Entry{List: Allow, Network: n, Exempt: []string{"l1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.Add(ctx, Entry{List: Allow, Network: n, Exempt: []string{config.ExemptAll}}); err != nil {
		t.Errorf("replacing the one entry of full lists: %v", err)
	}
	if all, _ := ls.List().Exempt(netip.MustParseAddr("10.1.2.3")); !all {
		t.Error("the replaced entry is not in force")
	}
	if _, err := ls.Add(ctx, Entry{List: Deny, Network: netip.MustParsePrefix("192.0.2.0/24")}); !errors.Is(err, ErrFull) {
		t.Errorf("a new entry past the bound: %v, want ErrFull", err)
	}

	unbounded := New(&config.Access{}, nil, 0, nil)
	defer unbounded.Close()
	if _, err := unbounded.Add(ctx, Entry{List: Deny, Network: netip.MustParsePrefix("192.0.2.0/24")}); err != nil {
		t.Errorf("the first entry of lists made without max_entries: %v", err)
	}
}

// TestNewWithHungRedis: lists made while their Redis takes connections
// but answers nothing are returned all the same, with the file's entries
// alone, rather than holding up the start for ever; once Redis answers
// again, the API's entries come into force.
func TestNewWithHungRedis(t *testing.T) {
	srv := redistest.Start(t)
	c, err := redisconn.Open("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := NewRedis(c).Put(context.Background(), Entry{List: Deny, Network: netip.MustParsePrefix("198.51.100.0/24"),
		Source: "api"}); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	resumed := false
	resume := func() {
		if !resumed {
			srv.Resume()
			resumed = true
		}
	}
	defer resume()
	file := &config.Access{MaxEntries: 10, DenyPrefixes: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}
	made := make(chan *Lists, 1)
	go func() { made <- New(file, NewRedis(c), 10*time.Millisecond, nil) }()
	var ls *Lists
	select {
	case ls = <-made:
	case <-time.After(30 * time.Second):
		t.Error("New did not return within 30s of a Redis that answers nothing")
		resume()
		ls = <-made
	}
	defer ls.Close()
	if !ls.List().Denied(netip.MustParseAddr("203.0.113.1")) {
		t.Error("the file's entries are not in force")
	}
	resume()
	deadline := time.Now().Add(30 * time.Second)
	for !ls.List().Denied(netip.MustParseAddr("198.51.100.1")) {
		if time.Now().After(deadline) {
			t.Fatal("the API's entry not in force within 30s of Redis answering again")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNAT64ClientsJudgedAsIPv4: an IPv4 client that a translator writes as
// an address of 64:ff9b::/96 is counted and banned under its IPv4 address
// (identity.ClientKey), so the lists judge it by that address too: an IPv4
// deny entry refuses it and an IPv4 allow entry exempts it, and an entry
// written in the translator's form still holds.
func TestNAT64ClientsJudgedAsIPv4(t *testing.T) {
	p := netip.MustParsePrefix
	l := Compile([]Entry{
		{List: Deny, Network: p("203.0.113.0/24")},
		{List: Deny, Network: p("64:ff9b::c633:6400/120")}, // 198.51.100.0/24, as the translator writes it
		{List: Allow, Network: p("192.0.2.10/32"), Exempt: []string{config.ExemptAll}},
		{List: Allow, Network: p("10.0.0.0/8"), Exempt: []string{"l1"}},
	})
	a := netip.MustParseAddr
	for addr, want := range map[string]bool{
		"203.0.113.9": true, "64:ff9b::203.0.113.9": true, "64:ff9b::cb00:7109": true,
		"198.51.100.7": false, "64:ff9b::198.51.100.7": true,
		"64:ff9b::203.0.114.1": false, "64:ff9b:1::203.0.113.9": false,
	} {
		if got := l.Denied(a(addr)); got != want {
			t.Errorf("Denied(%s) = %v, want %v", addr, got, want)
		}
	}
	if all, _ := l.Exempt(a("64:ff9b::192.0.2.10")); !all {
		t.Error("the health checker through the translator is not exempt from every limit")
	}
	if all, names := l.Exempt(a("64:ff9b::10.2.3.4")); all || len(names) != 1 || names[0] != "l1" {
		t.Errorf("64:ff9b::10.2.3.4: exempt %v %v, want l1", all, names)
	}
}

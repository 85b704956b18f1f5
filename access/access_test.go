package access

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/floodgate/floodgate/config"
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

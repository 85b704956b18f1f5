package identity

import (
	"testing"
)

// peerCases are remote addresses of every form, and near misses.
var peerCases = []string{
	"192.0.2.1:80", "0.0.0.0:0", "255.255.255.255:65535", "10.1.2.3", "127.0.0.1:1234",
	"256.0.0.1:80", "1.2.3.4:65536", "1.2.3.4:", "1.2.3.4:0080", "01.2.3.4:80", "1.2.3:80", "1.2.3.4.5:80",
	"1.2.3.4:80x", "1.2.3.4 :80", " 1.2.3.4:80", "1..3.4:80", "1.2.3.4:123456", "1.2.3.0004:1",
	"[::1]:80", "[2001:db8::1]:443", "::1", "[::ffff:192.0.2.1]:80", "[fe80::1%eth0]:80", "2001:db8::1",
	"", ":80", "/run/floodgate.sock", "@", "1.2.3.4:-1", "1.2.3.4:+1",
}

// TestParsePeerFastPath: the IPv4 fast path answers as netip does for
// every input, and leaves to it what it does not read.
func TestParsePeerFastPath(t *testing.T) {
	for _, s := range peerCases {
		if got, want := ParsePeer(s), parsePeer(s); got != want {
			t.Errorf("ParsePeer(%q) = %v, netip says %v", s, got, want)
		}
	}
	if _, ok := parseIPv4Peer("192.0.2.1:80"); !ok {
		t.Error("the fast path does not read ip:port")
	}
}

func FuzzParsePeer(f *testing.F) {
	for _, s := range peerCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ParsePeer(s), parsePeer(s); got != want {
			t.Errorf("ParsePeer(%q) = %v, netip says %v", s, got, want)
		}
	})
}

func BenchmarkParsePeer(b *testing.B) {
	for b.Loop() {
		ParsePeer("192.0.2.1:54321")
	}
}

func BenchmarkParsePeerNetip(b *testing.B) {
	for b.Loop() {
		parsePeer("192.0.2.1:54321")
	}
}

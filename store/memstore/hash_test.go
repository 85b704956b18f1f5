package memstore

import (
	"strconv"
	"testing"
)

// TestKeyHashSpread checks that the key hash spreads similar keys evenly
// over the bits the store uses: the shard (top bits), the home slot (low
// bits) and the fingerprint (bits 32 to 39), for keys of every length
// class, and that it depends on the rule, on every byte and on the length.
func TestKeyHashSpread(t *testing.T) {
	t.Parallel()
	s, err := New(Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, prefix := range []string{"", "u", "user:", "a-longer-key-prefix/"} {
		const n, buckets = 1 << 16, 64
		var top, low, fp [buckets]int
		for i := range n {
			h := s.hash("rule", prefix+strconv.Itoa(i))
			top[h>>58]++
			low[h%buckets]++
			fp[(h>>32)%buckets]++
		}
		for name, c := range map[string]*[buckets]int{"top": &top, "low": &low, "fingerprint": &fp} {
			for b, k := range c {
				// 1024 keys per bucket on average; a fair hash stays well within ±25%.
				if k < 768 || k > 1280 {
					t.Fatalf("prefix %q: %s bits: bucket %d holds %d of %d keys", prefix, name, b, k, n)
				}
			}
		}
	}
	if s.hash("a", "key") == s.hash("b", "key") {
		t.Fatal("two rules' hashes of one key are equal")
	}
	key := []byte("0123456789abcdefghij")
	base := s.hash("r", string(key))
	for i := range key {
		for bit := range 8 {
			k := append([]byte(nil), key...)
			k[i] ^= 1 << bit
			if s.hash("r", string(k)) == base {
				t.Fatalf("flipping bit %d of byte %d leaves the hash unchanged", bit, i)
			}
		}
	}
	for n := 1; n <= len(key); n++ {
		if s.hash("r", string(key[:n])) == s.hash("r", string(key[:n-1])) {
			t.Fatalf("keys of %d and %d bytes hash alike", n, n-1)
		}
	}
}

// TestSameKey checks the index's key comparison against the language's, for
// keys of every length around the inline sizes (8 to 16 bytes) that differ
// in any one byte, in their length, or not at all; and that it reads no
// byte beyond either key (each key is cut from the end of a larger one).
func TestSameKey(t *testing.T) {
	t.Parallel()
	base := []byte("0123456789abcdefghijklmnopqrstuvwxyz-0123456789")
	for n := 0; n <= 40; n++ {
		a := string(base[:n])
		if !sameKey(a, string([]byte(a))) {
			t.Fatalf("%q: a copy differs", a)
		}
		for i := range n {
			b := []byte(a)
			b[i] ^= 1
			if sameKey(a, string(b)) || sameKey(string(b), a) {
				t.Fatalf("%q and %q: equal", a, b)
			}
		}
		if n > 0 && (sameKey(a, a[:n-1]) || sameKey(a[:n-1], a)) {
			t.Fatalf("%q: equal to %q", a, a[:n-1])
		}
		// Bytes around equal keys do not count.
		x, y := "x"+a+"tail", "y"+a+"TAIL"
		if !sameKey(x[1:1+n], y[1:1+n]) {
			t.Fatalf("%q: cut from two strings, differs", a)
		}
	}
}

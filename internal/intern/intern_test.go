package intern

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
)

func TestStringEqualsBytes(t *testing.T) {
	tb := New(16) // small: slots are shared, and replaced
	for round := range 3 {
		for i := range 1000 {
			b := []byte("ip:10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256))
			if got := tb.String(b); got != string(b) {
				t.Fatalf("round %d: String(%q) = %q", round, b, got)
			}
		}
	}
	if got := tb.String(nil); got != "" {
		t.Fatalf("String(nil) = %q", got)
	}
	long := make([]byte, MaxLen+1)
	for i := range long {
		long[i] = 'k'
	}
	if got := tb.String(long); got != string(long) {
		t.Fatal("a string longer than MaxLen differs from its bytes")
	}
}

// The bytes the caller reuses must not change a string returned before.
func TestStringOutlivesBuffer(t *testing.T) {
	tb := New(16)
	buf := []byte("ip:192.0.2.1")
	s := tb.String(buf)
	copy(buf, "ip:198.51.100")
	if s != "ip:192.0.2.1" {
		t.Fatalf("a returned string changed with its buffer: %q", s)
	}
	if again := tb.String([]byte("ip:192.0.2.1")); again != s {
		t.Fatalf("String = %q, want %q", again, s)
	}
}

func TestRepeatAllocatesNothing(t *testing.T) {
	var tb Table // the zero Table is ready
	b := []byte(`"per-client";r=0;t=60`)
	tb.String(b)
	if n := testing.AllocsPerRun(100, func() { tb.String(b) }); n != 0 {
		t.Fatalf("a repeated string allocated %v times", n)
	}
}

// Many goroutines storing different bytes into few slots: every string
// returned is the one asked for (run with -race).
func TestConcurrent(t *testing.T) {
	tb := New(16)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				want := fmt.Sprintf("k%d-%d", g, i%50)
				if got := tb.String([]byte(want)); got != want {
					t.Errorf("String(%q) = %q", want, got)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkStringHit(b *testing.B) {
	tb := New(256)
	key := []byte("ip:192.0.2.1")
	b.ReportAllocs()
	for b.Loop() {
		tb.String(key)
	}
}

func BenchmarkConvert(b *testing.B) {
	key := []byte("ip:192.0.2.1")
	var s string
	b.ReportAllocs()
	for b.Loop() {
		s = string(key)
	}
	_ = s
}

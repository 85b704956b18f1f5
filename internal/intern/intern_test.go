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

// Ever-new bytes (a flood from many addresses) are not kept: each is seen
// once. Bytes longer than MaxLen are never kept, even when they come back;
// bytes that come back are, in their one slot.
func TestBoundedUnderNewBytes(t *testing.T) {
	tb := New(64)
	for i := range 100_000 {
		b := strconv.AppendInt([]byte("ip:10."), int64(i), 10)
		if tb.String(b) != string(b) {
			t.Fatalf("String(%q) differs", b)
		}
	}
	if n := held(tb); n != 0 {
		t.Fatalf("%d of 100,000 keys seen once each are held", n)
	}
	long := make([]byte, MaxLen+1)
	for i := range long {
		long[i] = 'k'
	}
	for range 3 {
		if tb.String(long) != string(long) {
			t.Fatal("a string longer than MaxLen differs from its bytes")
		}
	}
	if n := held(tb); n != 0 {
		t.Fatalf("a string longer than MaxLen is held (%d held)", n)
	}
	for range 3 {
		tb.String([]byte("ip:192.0.2.1"))
	}
	if n := held(tb); n != 1 {
		t.Fatalf("%d strings held after one key came three times, want 1", n)
	}
}

// held counts the strings tb holds.
func held(tb *Table) int {
	n := 0
	for i := range tb.slots {
		if tb.slots[i].e.Load() != nil {
			n++
		}
	}
	return n
}

// A stream of bytes each seen once (a flood from many addresses) leaves
// the strings held in place: a client that keeps coming back still
// allocates nothing.
func TestNewBytesLeaveHeldStrings(t *testing.T) {
	tb := New(16)
	kept := []byte("ip:192.0.2.1")
	tb.String(kept)
	tb.String(kept) // missed twice in a row: held
	for i := range 10_000 {
		tb.String(strconv.AppendInt([]byte("ip:10."), int64(i), 10))
	}
	if n := testing.AllocsPerRun(100, func() { tb.String(kept) }); n != 0 {
		t.Fatalf("a held string allocated %v times after a stream of new bytes", n)
	}
}

func BenchmarkStringHit(b *testing.B) {
	tb := New(256)
	key := []byte("ip:192.0.2.1")
	b.ReportAllocs()
	for b.Loop() {
		tb.String(key)
	}
}

// BenchmarkStringMiss: bytes never seen before, each time; against
// BenchmarkConvertNew, the same bytes converted without a table.
func BenchmarkStringMiss(b *testing.B) {
	tb := New(1024)
	benchNew(b, tb.String)
}

func BenchmarkConvertNew(b *testing.B) {
	benchNew(b, func(k []byte) string { return string(k) })
}

var sink string

func benchNew(b *testing.B, conv func([]byte) string) {
	key := make([]byte, 0, 32)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		sink = conv(strconv.AppendInt(append(key[:0], "ip:10."...), int64(i), 10))
	}
}

// BenchmarkConvert: bytes converted without a table, the same each time.
func BenchmarkConvert(b *testing.B) {
	key := []byte("ip:192.0.2.1")
	b.ReportAllocs()
	for b.Loop() {
		sink = string(key)
	}
}

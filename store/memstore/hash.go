package memstore

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// Odd constants with well-mixed bits, for the key hash.
const (
	hashLen = 0xa0761d6478bd642f
	hashFin = 0xe7037ed1a0b428db
)

// keyHash hashes key, starting from h, the store's seeded hash of the
// rule's ID, with k, an odd multiplier drawn from the store's seed. Both
// are secret, so that outsiders who choose keys cannot make them collide
// on purpose. It reads the key 8 bytes at a time (a short key in one or
// two reads) and multiplies once per read, inline: hash/maphash costs a few
// calls per key.
func keyHash(h, k uint64, key string) uint64 {
	b := unsafe.Slice(unsafe.StringData(key), len(key))
	n := len(b)
	h ^= uint64(n) * hashLen
	var w uint64
	switch {
	case n > 8:
		last := binary.LittleEndian.Uint64(b[n-8:]) // overlaps the loop's last read
		for ; len(b) > 8; b = b[8:] {
			h = mum(h^binary.LittleEndian.Uint64(b), k)
		}
		w = last
	case n == 8:
		w = binary.LittleEndian.Uint64(b)
	case n >= 4:
		w = uint64(binary.LittleEndian.Uint32(b)) | uint64(binary.LittleEndian.Uint32(b[n-4:]))<<32
	case n > 0:
		w = uint64(b[0]) | uint64(b[n>>1])<<8 | uint64(b[n-1])<<16
	}
	return mum(mum(h^w, k), hashFin)
}

// mum folds the 128-bit product of a and b into 64 bits.
func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// sameKey reports whether the keys a and b are equal. A key of 8 to 16
// bytes, the usual size, is compared inline in two reads of each (which
// overlap below 16 bytes), with no call to the runtime's comparison.
func sameKey(a, b string) bool {
	n := len(a)
	if n != len(b) || n < 8 || n > 16 {
		return a == b
	}
	x, y := unsafe.Pointer(unsafe.StringData(a)), unsafe.Pointer(unsafe.StringData(b))
	return (word(x)^word(y))|(word(unsafe.Add(x, n-8))^word(unsafe.Add(y, n-8))) == 0
}

// word reads the 8 bytes at p.
func word(p unsafe.Pointer) uint64 { return binary.LittleEndian.Uint64((*[8]byte)(p)[:]) }

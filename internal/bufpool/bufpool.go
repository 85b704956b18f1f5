// Package bufpool lends the 32 KiB buffers that the gateway's engines copy
// bodies through, so that a proxied answer allocates none.
package bufpool

import "sync"

// Size is the length of a buffer.
const Size = 32 << 10

// Pool lends buffers of Size bytes; the zero Pool is ready. It is an
// httputil.BufferPool.
type Pool struct{ p sync.Pool }

// Get returns a buffer of Size bytes.
func (b *Pool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, Size)
}

// Put gives a buffer back.
func (b *Pool) Put(buf []byte) { b.p.Put(&buf) }

// Copy is the pool the engines share.
var Copy = &Pool{}

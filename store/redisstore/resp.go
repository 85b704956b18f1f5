package redisstore

// respCount counts the whole RESP values in a byte stream fed to it in
// pieces of any size: the commands a connection writes, or the replies it
// reads. It reads only the types and lengths; bulk payloads are skipped by
// their length. Out-of-band pushes (RESP3 '>') at the top level are not
// counted: they answer no command. A stream it cannot follow (an
// attribute, a streamed aggregate, a malformed header) makes it lost for
// good, and then it counts nothing more.
type respCount struct {
	state uint8
	typ   byte  // the type of the value whose header is being read
	num   int64 // the header's number so far
	neg   bool
	skip  int64   // bytes of a bulk payload and its CRLF still to skip
	open  []int64 // elements still to come in each open aggregate, outermost first
	push  bool    // the top-level value is a push
	n     int64   // whole top-level values seen
	lost  bool
}

const (
	respType uint8 = iota // expecting a type byte
	respLine              // reading a header line up to '\n'
	respBulk              // skipping a bulk payload
)

// maxRespDepth bounds the nesting of aggregates followed.
const maxRespDepth = 64

// feed reads b and returns the number of whole top-level values seen so
// far (0 once lost).
func (c *respCount) feed(b []byte) int64 {
	for i := 0; i < len(b) && !c.lost; {
		switch c.state {
		case respType:
			c.typ, c.num, c.neg = b[i], 0, false
			if len(c.open) == 0 {
				c.push = c.typ == '>'
			}
			c.state = respLine
			i++
		case respLine:
			for ; i < len(b) && !c.lost; i++ {
				ch := b[i]
				if ch == '\n' {
					i++
					c.header()
					break
				}
				if isLengthType(c.typ) {
					switch {
					case ch >= '0' && ch <= '9':
						c.num = c.num*10 + int64(ch-'0')
						if c.num > 1<<40 {
							c.lost = true
						}
					case ch == '-' && c.num == 0:
						c.neg = true
					case ch == '\r':
					default:
						c.lost = true // '?' (streamed) or garbage
					}
				}
			}
		case respBulk:
			k := min(c.skip, int64(len(b)-i))
			c.skip -= k
			i += int(k)
			if c.skip == 0 {
				c.state = respType
				c.value()
			}
		}
	}
	if c.lost {
		return 0
	}
	return c.n
}

// isLengthType reports the types whose header is a length or a count.
func isLengthType(t byte) bool {
	switch t {
	case '$', '!', '=', '*', '~', '>', '%':
		return true
	}
	return false
}

// header acts on a header line just read.
func (c *respCount) header() {
	c.state = respType
	switch c.typ {
	case '$', '!', '=':
		if c.neg {
			c.value() // null
			return
		}
		c.skip, c.state = c.num+2, respBulk
	case '*', '~', '>', '%':
		n := c.num
		if c.typ == '%' {
			n *= 2
		}
		if c.neg || n == 0 {
			c.value() // null or empty
			return
		}
		if len(c.open) >= maxRespDepth {
			c.lost = true
			return
		}
		c.open = append(c.open, n)
	case '+', '-', ':', '_', ',', '#', '(':
		c.value()
	default: // '|' attributes, and anything unknown
		c.lost = true
	}
}

// value counts one whole value: an element of the innermost open
// aggregate, or a top-level value.
func (c *respCount) value() {
	for len(c.open) > 0 {
		top := len(c.open) - 1
		if c.open[top]--; c.open[top] > 0 {
			return
		}
		c.open = c.open[:top] // that aggregate is whole: a value of its parent
	}
	if !c.push {
		c.n++
	}
	c.push = false
}

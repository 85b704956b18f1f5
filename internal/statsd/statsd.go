package statsd

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"time"
)

// Defaults of Options.
const (
	DefaultFlushInterval = time.Second
	DefaultDialTimeout   = 2 * time.Second
	DefaultWriteTimeout  = time.Second
	DefaultRetryInterval = 3 * time.Second
	DefaultMaxBuffer     = 1 << 20
	// datagramSize keeps a UDP datagram within one Ethernet frame.
	datagramSize = 1432
)

// Options configure a Client. Addr is required; the zero value of every
// other field is the default.
type Options struct {
	// Network is "tcp" (the default) or "udp".
	Network string
	// Addr is the server's host:port.
	Addr string
	// FlushInterval is the time between two sends of the buffer.
	FlushInterval time.Duration
	// DialTimeout and WriteTimeout bound a dial and one send.
	DialTimeout, WriteTimeout time.Duration
	// RetryInterval is the least time between two dials.
	RetryInterval time.Duration
	// MaxBuffer bounds the bytes held while unsent.
	MaxBuffer int
	// Logger receives connection failures (one line per failed dial
	// after a success, not per retry). Default: discard.
	Logger *slog.Logger
}

// Client sends statsd lines. Its methods are safe for concurrent use.
type Client struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex // guards buf and dropped
	buf     []byte
	dropped uint64

	kick chan chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// New starts a Client; Close stops it.
func New(opts Options) (*Client, error) {
	if opts.Addr == "" {
		return nil, errors.New("statsd: no address")
	}
	switch opts.Network {
	case "":
		opts.Network = "tcp"
	case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
	default:
		return nil, errors.New("statsd: network " + strconv.Quote(opts.Network) + ": want tcp or udp")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opts.FlushInterval, DefaultFlushInterval)
	def(&opts.DialTimeout, DefaultDialTimeout)
	def(&opts.WriteTimeout, DefaultWriteTimeout)
	def(&opts.RetryInterval, DefaultRetryInterval)
	if opts.MaxBuffer <= 0 {
		opts.MaxBuffer = DefaultMaxBuffer
	}
	c := &Client{opts: opts, log: opts.Logger, kick: make(chan chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	go c.run()
	return c, nil
}

// Counter adds "name:v|c".
func (c *Client) Counter(name string, v uint64) {
	var num [24]byte
	c.line(name, strconv.AppendUint(num[:0], v, 10), "|c\n")
}

// Gauge adds "name:v|g".
func (c *Client) Gauge(name string, v uint64) {
	var num [24]byte
	c.line(name, strconv.AppendUint(num[:0], v, 10), "|g\n")
}

// Timer adds "name:v|ms": a whole v as an integer, else with six decimals.
// The rate-limit service adds one for every gRPC call, so the number is
// written on the stack.
func (c *Client) Timer(name string, v float64) {
	var num [32]byte
	var b []byte
	if v >= 0 && v < math.MaxUint64 && math.Trunc(v) == v {
		b = strconv.AppendUint(num[:0], uint64(v), 10)
	} else {
		b = strconv.AppendFloat(num[:0], v, 'f', 6, 64)
	}
	c.line(name, b, "|ms\n")
}

func (c *Client) line(name string, value []byte, suffix string) {
	n := len(name) + 1 + len(value) + len(suffix)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.buf)+n > c.opts.MaxBuffer {
		c.dropped++
		return
	}
	c.buf = append(c.buf, name...)
	c.buf = append(c.buf, ':')
	c.buf = append(c.buf, value...)
	c.buf = append(c.buf, suffix...)
}

// Dropped returns how many lines were dropped because the buffer was full.
func (c *Client) Dropped() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// Flush sends the buffer now and returns once it was sent or could not be
// (the server unreachable), or once the Client is closed.
func (c *Client) Flush() {
	ch := make(chan struct{})
	select {
	case c.kick <- ch:
	case <-c.done:
		return
	}
	select {
	case <-ch:
	case <-c.done:
	}
}

// Close sends what is buffered (one attempt, within the timeouts) and
// closes the connection.
func (c *Client) Close() error {
	c.once.Do(func() { close(c.stop) })
	<-c.done
	return nil
}

// take returns the buffered lines and empties the buffer.
func (c *Client) take() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.buf
	c.buf = nil
	return b
}

// putBack returns unsent lines to the front of the buffer, dropping the
// newest lines that no longer fit.
func (c *Client) putBack(b []byte) {
	if len(b) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	all := append(b, c.buf...)
	for len(all) > c.opts.MaxBuffer {
		i := bytes.LastIndexByte(all[:len(all)-1], '\n')
		c.dropped++
		all = all[:i+1]
	}
	c.buf = all
}

func (c *Client) run() {
	defer close(c.done)
	t := time.NewTicker(c.opts.FlushInterval)
	defer t.Stop()
	var conn net.Conn
	var nextDial time.Time
	failing := false
	send := func(final bool) {
		b := c.take()
		if len(b) == 0 {
			return
		}
		if conn == nil {
			if !final && time.Now().Before(nextDial) {
				c.putBack(b)
				return
			}
			var err error
			conn, err = net.DialTimeout(c.opts.Network, c.opts.Addr, c.opts.DialTimeout)
			if err != nil {
				conn, nextDial = nil, time.Now().Add(c.opts.RetryInterval)
				if !failing {
					c.log.Warn("statsd: cannot connect; lines are kept and sent once it can", "addr", c.opts.Addr, "err", err)
				}
				failing = true
				c.putBack(b)
				return
			}
			failing = false
		}
		sent, err := c.write(conn, b)
		if err != nil {
			_ = conn.Close()
			conn, nextDial = nil, time.Now().Add(c.opts.RetryInterval)
			if !failing {
				c.log.Warn("statsd: send failed; reconnecting", "addr", c.opts.Addr, "err", err)
			}
			failing = true
			c.putBack(b[sent:])
		}
	}
	for {
		select {
		case <-t.C:
			send(false)
		case ch := <-c.kick:
			send(false)
			close(ch)
		case <-c.stop:
			send(true)
			if conn != nil {
				_ = conn.Close()
			}
			return
		}
	}
}

// write sends b, in datagrams of whole lines over UDP. It returns how
// many bytes of whole lines were sent.
func (c *Client) write(conn net.Conn, b []byte) (int, error) {
	if err := conn.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout)); err != nil {
		return 0, err
	}
	udp := c.opts.Network[:3] == "udp"
	sent := 0
	for sent < len(b) {
		chunk := b[sent:]
		if udp && len(chunk) > datagramSize {
			if i := bytes.LastIndexByte(chunk[:datagramSize], '\n'); i >= 0 {
				chunk = chunk[:i+1]
			} else if i := bytes.IndexByte(chunk, '\n'); i >= 0 {
				chunk = chunk[:i+1] // one line longer than a datagram
			}
		}
		n, err := conn.Write(chunk)
		if err != nil {
			// The line cut by a partial write is sent again whole.
			return sent + bytes.LastIndexByte(chunk[:n], '\n') + 1, err
		}
		sent += n
	}
	return sent, nil
}

package replay

import (
	"context"
	"fmt"
	"math"
	"time"
)

// merger hands out the records of several logs in order of arrival.
//
// A log is written as requests end, so its lines are out of order by up
// to the longest request's duration; and several logs (instances, or
// files rotated in turn) interleave. The merger holds the records of the
// last Window of every log in a heap and hands out the earliest once every
// log still being read has gone past it by Window. It reads on from the
// log that is furthest behind, so rotated files given in any order cost no
// more memory than one. A record that arrives later than that (a request
// longer than Window) is replayed at the time the replay has reached, and
// counted.
//
// A line dated far ahead of its log (a clock's error: a year from now in a
// log of today) would be replayed last and stretch the report's span and
// timeline over the years between. The merger holds the lines that jump
// more than Window past their log, up to maxAhead of them: when the log
// comes back from them by more than Window, they are counted as
// unreadable, with their lines; when it goes on from there, or ends, they
// are replayed.
type merger struct {
	ctx    context.Context // waiting for a log ends with it
	srcs   []*source
	window int64

	slab []Record
	free []int32
	heap []heapItem
	seq  uint64

	last     int64 // the arrival of the last record handed out
	started  bool
	late     int64
	maxLate  time.Duration
	maxHeld  int
	consumed int64
}

type heapItem struct {
	t    int64
	seq  uint64
	slot int32
}

func (a heapItem) less(b heapItem) bool { return a.t < b.t || a.t == b.t && a.seq < b.seq }

func newMerger(ctx context.Context, srcs []*source, window time.Duration) *merger {
	return &merger{ctx: ctx, srcs: srcs, window: int64(window)}
}

// next copies the next record into rec; false when every log is done. A
// read error of a log ends the replay with that error, and so does the
// end of the merger's context while it waits for a log (a pipe that
// stalls, or a long run of lines without a request).
func (m *merger) next(rec *Record) (bool, error) {
	for {
		if len(m.heap) > 0 && m.heap[0].t <= m.watermark() {
			m.pop(rec)
			return true, nil
		}
		s := m.behind()
		if s == nil {
			if len(m.heap) == 0 {
				return false, nil
			}
			m.pop(rec)
			return true, nil
		}
		var b *batch
		var ok bool
		select {
		case b, ok = <-s.out:
		case <-m.ctx.Done():
			return false, fmt.Errorf("replay: %w", m.ctx.Err())
		}
		if !ok {
			m.release(s)
			s.done = true
			continue
		}
		if b.err != nil {
			return false, b.err
		}
		for i := range b.recs {
			m.take(s, &b.recs[i])
		}
		s.recycle(b)
	}
}

// maxAhead bounds the lines of a log held as possibly ahead of it: a
// longer run past the log's time is a jump of the log itself.
const maxAhead = 8

// take reads the next record of s, in the order of its log: it is merged,
// or held while it may be ahead of its log, or it shows the lines held
// before it to be ahead: they are counted as unreadable and not replayed.
// A line is ahead when it arrived more than the window after every
// request merged before it ended, and a line after it ends more than the
// window before it arrived: a log written as requests end, or sorted by
// arrival, puts a long request in neither place. The first lines of a log
// are held until it shows where its time is.
func (m *merger) take(s *source, r *Record) {
	end := r.Time + int64(r.Duration)
	if len(s.ahead) > 0 {
		switch {
		case end < s.ahead[0].Time-m.window:
			back := time.Unix(0, end).UTC().Format(time.RFC3339Nano)
			for i := range s.ahead {
				s.skip(s.ahead[i].Line, fmt.Errorf("time %s is ahead of its log: line %d comes back to %s, more than the window (%v) before it",
					time.Unix(0, s.ahead[i].Time).UTC().Format(time.RFC3339Nano), r.Line, back, time.Duration(m.window)))
			}
			clear(s.ahead)
			s.ahead = s.ahead[:0]
		case r.Time <= s.aheadEnd+m.window && len(s.ahead) < maxAhead:
			s.ahead = append(s.ahead, *r)
			s.aheadEnd = max(s.aheadEnd, end)
			return
		default:
			// The log goes on from the lines held, or jumps past them.
			m.release(s)
		}
	}
	if !s.based || r.Time > s.base+m.window {
		s.ahead = append(s.ahead, *r)
		s.aheadEnd = end
		return
	}
	m.accept(s, r)
}

// release merges the records s holds: its log went on from them, or
// ended.
func (m *merger) release(s *source) {
	for i := range s.ahead {
		m.accept(s, &s.ahead[i])
	}
	clear(s.ahead)
	s.ahead = s.ahead[:0]
}

// accept merges a record of s.
func (m *merger) accept(s *source, r *Record) {
	m.push(r)
	s.maxSeen = max(s.maxSeen, r.Time)
	s.base, s.based = max(s.base, r.Time+int64(r.Duration)), true
}

// watermark is the arrival up to which every record has been read, as
// far as Window tells.
func (m *merger) watermark() int64 {
	w := int64(math.MaxInt64)
	for _, s := range m.srcs {
		if !s.done {
			w = min(w, s.maxSeen-m.window)
		}
	}
	return w
}

// behind returns the log still being read whose records are the
// earliest, or nil when all are done.
func (m *merger) behind() *source {
	var b *source
	for _, s := range m.srcs {
		if !s.done && (b == nil || s.maxSeen < b.maxSeen) {
			b = s
		}
	}
	return b
}

func (m *merger) push(r *Record) {
	var slot int32
	if n := len(m.free); n > 0 {
		slot, m.free = m.free[n-1], m.free[:n-1]
		m.slab[slot] = *r
	} else {
		slot = int32(len(m.slab))
		m.slab = append(m.slab, *r)
	}
	m.seq++
	it := heapItem{t: r.Time, seq: m.seq, slot: slot}
	m.heap = append(m.heap, it)
	i := len(m.heap) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !it.less(m.heap[p]) {
			break
		}
		m.heap[i] = m.heap[p]
		i = p
	}
	m.heap[i] = it
	m.maxHeld = max(m.maxHeld, len(m.heap))
}

func (m *merger) pop(rec *Record) {
	top := m.heap[0]
	*rec = m.slab[top.slot]
	m.slab[top.slot] = Record{}
	m.free = append(m.free, top.slot)
	n := len(m.heap) - 1
	it := m.heap[n]
	m.heap = m.heap[:n]
	if n > 0 {
		i := 0
		for {
			c := 2*i + 1
			if c >= n {
				break
			}
			if c+1 < n && m.heap[c+1].less(m.heap[c]) {
				c++
			}
			if !m.heap[c].less(it) {
				break
			}
			m.heap[i] = m.heap[c]
			i = c
		}
		m.heap[i] = it
	}
	m.consumed++
	if m.started && rec.Time < m.last {
		m.late++
		m.maxLate = max(m.maxLate, time.Duration(m.last-rec.Time))
		rec.Time = m.last
	}
	m.last, m.started = rec.Time, true
}

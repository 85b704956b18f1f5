package memstore

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/regfile"
	"github.com/floodgate/floodgate/limiter"
)

// The state file is a fixed header followed by the body:
//
//	magic   [8]byte   "FGMSTATE"
//	version uint32    2 (little endian, like every integer of the header)
//	hcrc    uint32    CRC-32C (Castagnoli) of the rest of the header
//	crc     uint32    CRC-32C of the body
//	-       uint32    zero
//	length  uint64    the body's length in bytes
//	count   uint64    the number of records in the body
//	taken   int64     the instant of the store's timeline when the snapshot ended:
//	                  every state in it is as of then or earlier
//	wall    int64     the wall clock then, Unix ns
//	up      int64     the boot clock then (Options.Boot), ns since boot
//	boot    [16]byte  bootHash of the boot's ID; zero when there was no boot clock
//
// and count records, each: rule ID and key (uvarint length, bytes), the
// state's Last, A, B, C, the expiry and the instant until which the key is
// denying (varints), the number of Ext entries plus one, or 0 for none
// (uvarint), and each entry's At, Weight (varints) and ID (uvarint).
//
// Version 1, which New still reads, has a header that ends after taken (the
// wall clock when the snapshot began), a crc of the body alone, and
// records without the deny instant.
const (
	fileMagic   = "FGMSTATE"
	fileVersion = 2
	headerSize  = 8 + 4 + 4 + 4 + 4 + 8 + 8 + 8 + 8 + 8 + 16
	headerSize1 = 8 + 4 + 4 + 8 + 8 + 8
	maxStrLen   = 1 << 20
	// minRecord is the fewest bytes a record takes: two string lengths,
	// six varints and an entry count (one varint fewer in version 1).
	minRecord = 9
)

// latestInstant is the latest instant a state file may hold for when it
// was taken and for a state's last decision, about the year 2116: the
// store's timeline continues from them, and a decision adds a limit's
// span (at most a quarter of the int64 range, floodgate.MaxLeaseTTL) to
// its instant, twice for a rate. Past it a timeline would leave the int64
// range within a span or wrap: every decision would fail, and each limit
// fall to its failure policy, for as long as the store ran and in every
// snapshot it then wrote.
const latestInstant = math.MaxInt64 / 2

// rebaseTolerance is the shift of the timeline below which New leaves it
// where it is: the boot clock and the wall clock are read at slightly
// different moments, and a few milliseconds either way change nothing.
const rebaseTolerance = int64(time.Second)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errBadFile marks a state file that was read but does not check out.
var errBadFile = errors.New("memstore: state file rejected")

// Snapshot writes every live key to the state file now: to a temporary
// file in the same directory, synced, then renamed over the state file and
// the directory synced. A state file that is a symbolic link is written
// where the link leads, and the link stays. It does nothing without Options.StatePath.
func (s *Store) Snapshot() error {
	if s.opts.StatePath == "" {
		return nil
	}
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	began := time.Now().UnixNano()
	err := s.writeSnapshot()
	if err != nil {
		err = fmt.Errorf("memstore: snapshot: %w", err)
		s.snapErrors.Add(1)
		s.lastSnapErr.Store(&err)
		s.log.Warn("memstore: snapshot failed", "path", s.opts.StatePath, "err", err)
		return err
	}
	s.snapshots.Add(1)
	s.lastSnapshot.Store(began)
	s.lastSnapErr.Store(nil)
	return nil
}

// snapshotIfChanged writes a snapshot unless no state changed since the
// last successful one.
func (s *Store) snapshotIfChanged() {
	var writes uint64
	for k := range s.shards {
		sh := &s.shards[k]
		sh.mu.Lock()
		writes += sh.writes
		sh.mu.Unlock()
	}
	if s.snapshots.Load() > 0 && writes == s.snapWrites.Load() {
		return
	}
	if s.Snapshot() == nil {
		s.snapWrites.Store(writes)
	}
}

func (s *Store) writeSnapshot() (err error) {
	// A state file that is a symbolic link is replaced where it leads,
	// and stays a link.
	path, err := regfile.LinkTarget(s.opts.StatePath)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(tempPattern(path)))
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<16)
	if _, err = bw.Write(make([]byte, headerSize)); err != nil {
		return err
	}
	var (
		body   uint32 // CRC-32C of the body
		length uint64
		count  uint64
		buf    []byte
	)
	for k := range s.shards {
		sh := &s.shards[k]
		buf = buf[:0]
		sh.mu.Lock()
		now := s.now()
		for i := int32(0); i < sh.used; i++ {
			e := sh.at(i)
			if e.rule == nil || !s.live(e, now) {
				continue
			}
			buf = appendRecord(buf, e)
			count++
		}
		sh.mu.Unlock()
		body = crc32.Update(body, castagnoli, buf)
		length += uint64(len(buf))
		if _, err = bw.Write(buf); err != nil {
			return err
		}
	}
	if err = bw.Flush(); err != nil {
		return err
	}
	// Every state written is as of now or earlier.
	h := header{taken: s.timeline(), wall: s.wall()}
	if id, up, ok := s.boot(); ok {
		h.boot, h.up = bootHash(id), int64(up)
	}
	if _, err = f.WriteAt(appendHeader(nil, h, body, length, count), 0); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	// Make the rename itself durable; the state is written either way.
	_ = regfile.SyncDir(filepath.Dir(path))
	return nil
}

// appendHeader appends the header of a state file whose body of length
// bytes holds count records and has the CRC-32C body.
func appendHeader(b []byte, h header, body uint32, length, count uint64) []byte {
	start := len(b)
	b = append(b, fileMagic...)
	b = binary.LittleEndian.AppendUint32(b, fileVersion)
	b = binary.LittleEndian.AppendUint32(b, 0) // the header's checksum, below
	b = binary.LittleEndian.AppendUint32(b, body)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint64(b, length)
	b = binary.LittleEndian.AppendUint64(b, count)
	b = binary.LittleEndian.AppendUint64(b, uint64(h.taken))
	b = binary.LittleEndian.AppendUint64(b, uint64(h.wall))
	b = binary.LittleEndian.AppendUint64(b, uint64(h.up))
	b = append(b, h.boot[:]...)
	binary.LittleEndian.PutUint32(b[start+12:], crc32.Checksum(b[start+16:], castagnoli))
	return b
}

// tempPattern is the pattern of the state file's temporary files.
func tempPattern(path string) string { return path + ".tmp*" }

func appendRecord(b []byte, e *entry) []byte {
	b = binary.AppendUvarint(b, uint64(len(e.rule.ID())))
	b = append(b, e.rule.ID()...)
	b = binary.AppendUvarint(b, uint64(len(e.key)))
	b = append(b, e.key...)
	b = binary.AppendVarint(b, e.st.Last)
	b = binary.AppendVarint(b, e.st.A)
	b = binary.AppendVarint(b, e.st.B)
	b = binary.AppendVarint(b, e.st.C)
	b = binary.AppendVarint(b, e.exp)
	b = binary.AppendVarint(b, e.deny)
	if e.st.Ext == nil {
		return binary.AppendUvarint(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(e.st.Ext.Entries))+1)
	for _, x := range e.st.Ext.Entries {
		b = binary.AppendVarint(b, x.At)
		b = binary.AppendVarint(b, x.Weight)
		b = binary.AppendUvarint(b, x.ID)
	}
	return b
}

// record is one key read back from a state file.
type record struct {
	rule, key string
	st        algo.State
	exp, deny int64
}

// header is what a state file's header says of when it was taken.
type header struct {
	version uint32
	taken   int64    // on the store's timeline (version 1: the wall clock)
	wall    int64    // the wall clock (version 1: 0)
	up      int64    // the boot clock, when boot is not zero
	boot    [16]byte // bootHash of the boot's ID, or zero
}

// load reads the state file. It decodes and checks all of it before it
// stores a single key, and moves the store's timeline so that the limits
// continue from the snapshot (rebaseFor) before it does.
func (s *Store) load() {
	// Temporary files of snapshots cut short by a crash.
	if stale, err := filepath.Glob(tempPattern(s.opts.StatePath)); err == nil {
		for _, f := range stale {
			os.Remove(f)
		}
	}
	data, err := regfile.Read(s.opts.StatePath, regfile.Own)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var (
		h    header
		recs []record
	)
	if err == nil {
		h, recs, err = decodeFile(data)
	}
	if err != nil {
		s.loadErr = fmt.Errorf("memstore: load %s: %w", s.opts.StatePath, err)
		s.log.Warn("memstore: state file ignored, starting empty", "path", s.opts.StatePath, "err", err)
		return
	}
	var up int64
	if _, u, ok := s.boot(); ok {
		up = int64(u)
	}
	if d, how := rebaseFor(h, s.timeline(), s.bootID, up); d != 0 {
		s.shiftTimeline(d)
		s.rebase = d
		s.log.Warn("memstore: the state file's clock differs from this one's; its limits continue from where it was taken",
			"path", s.opts.StatePath, "shift", time.Duration(d), "measured_by", how)
	}
	now := s.timeline()
	rules := make(map[string]*limiter.Rule)
	for i := range recs {
		r := &recs[i]
		if r.exp <= now {
			continue
		}
		rule := rules[r.rule]
		if rule == nil {
			// A stand-in carrying only the ID; the first hit of the
			// real rule replaces it.
			rule = limiter.PlaceholderRule(r.rule)
			rules[r.rule] = rule
		}
		h := s.hash(r.rule, r.key)
		sh := &s.shards[h>>s.shift]
		if sh.find(h, rule, r.key) >= 0 {
			continue // a duplicate record: keep the first
		}
		i := s.insert(sh, h, rule, r.key, r.st, r.exp, now, noPins)
		sh.at(i).deny = r.deny
		s.loaded++
	}
}

// rebaseFor returns how far to move the timeline of a store whose
// timeline reads now, so that the limits of a snapshot with header h go on
// from where they were, and how that was measured. The timeline is the
// clock of every algorithm but calendar quotas, counted from the wall
// clock when the store started, so a wall clock that was wrong when either
// store started would otherwise show as time gone by or yet to come:
//
//   - Taken on this boot (boot and up, the boot clock now, match h): the
//     snapshot's instant plus the time the boot clock says went by since,
//     whatever either wall clock said. A snapshot from a clock that ran
//     fast or slow continues exactly.
//   - Otherwise by the wall clock, never back: a snapshot from the future
//     (a clock that ran fast, or runs slow now) continues from its own
//     instant, as if no time had gone by since, and its limits hold what
//     they held; one from the past is as old as the wall clock says.
//
// A shift smaller than rebaseTolerance is no shift.
func rebaseFor(h header, now int64, boot [16]byte, up int64) (d int64, how string) {
	var target int64
	switch {
	case h.boot != [16]byte{} && h.boot == boot && up >= h.up:
		target, how = satAdd(h.taken, up-h.up), "boot clock"
	case h.taken > now:
		target, how = h.taken, "wall clock"
	default:
		return 0, ""
	}
	if d = target - now; d > -rebaseTolerance && d < rebaseTolerance {
		return 0, ""
	}
	return d, how
}

// decodeFile checks the header and checksums and decodes every record.
func decodeFile(data []byte) (header, []record, error) {
	var h header
	if len(data) < headerSize1 {
		return h, nil, fmt.Errorf("%w: %d bytes is shorter than the header", errBadFile, len(data))
	}
	if string(data[:8]) != fileMagic {
		return h, nil, fmt.Errorf("%w: not a memstore state file (bad magic)", errBadFile)
	}
	var crc uint32
	var length, count uint64
	var body []byte
	switch h.version = binary.LittleEndian.Uint32(data[8:]); h.version {
	case 1:
		crc = binary.LittleEndian.Uint32(data[12:])
		length = binary.LittleEndian.Uint64(data[16:])
		count = binary.LittleEndian.Uint64(data[24:])
		h.taken = int64(binary.LittleEndian.Uint64(data[32:]))
		body = data[headerSize1:]
	case fileVersion:
		if len(data) < headerSize {
			return h, nil, fmt.Errorf("%w: %d bytes is shorter than the header", errBadFile, len(data))
		}
		if got, want := crc32.Checksum(data[16:headerSize], castagnoli), binary.LittleEndian.Uint32(data[12:]); got != want {
			return h, nil, fmt.Errorf("%w: header checksum mismatch (%08x, header says %08x)", errBadFile, got, want)
		}
		crc = binary.LittleEndian.Uint32(data[16:])
		length = binary.LittleEndian.Uint64(data[24:])
		count = binary.LittleEndian.Uint64(data[32:])
		h.taken = int64(binary.LittleEndian.Uint64(data[40:]))
		h.wall = int64(binary.LittleEndian.Uint64(data[48:]))
		h.up = int64(binary.LittleEndian.Uint64(data[56:]))
		copy(h.boot[:], data[64:80])
		body = data[headerSize:]
	default:
		return h, nil, fmt.Errorf("%w: unsupported version %d", errBadFile, h.version)
	}
	if h.taken > latestInstant {
		return h, nil, fmt.Errorf("%w: taken at %d ns, past the latest instant a state can hold", errBadFile, h.taken)
	}
	if length != uint64(len(body)) {
		return h, nil, fmt.Errorf("%w: body is %d bytes, header says %d (torn or truncated)", errBadFile, len(body), length)
	}
	if got := crc32.Checksum(body, castagnoli); got != crc {
		return h, nil, fmt.Errorf("%w: checksum mismatch (%08x, header says %08x)", errBadFile, got, crc)
	}
	if count > uint64(len(body))/(minRecord-1) {
		return h, nil, fmt.Errorf("%w: %d records cannot fit in %d bytes", errBadFile, count, len(body))
	}
	d := decoder{b: body}
	recs := make([]record, 0, count)
	for range count {
		var r record
		r.rule = d.str()
		r.key = d.str()
		r.st.Last, r.st.A, r.st.B, r.st.C = d.varint(), d.varint(), d.varint(), d.varint()
		r.exp = d.varint()
		if h.version >= 2 {
			r.deny = d.varint()
		}
		if n := d.uvarint(); n > 0 {
			n--
			if n > uint64(len(d.b))/3 { // three varints of a byte or more each
				d.fail("too many entries")
				break
			}
			r.st.Ext = &algo.Ext{Entries: make([]algo.Entry, n)}
			for j := range r.st.Ext.Entries {
				r.st.Ext.Entries[j] = algo.Entry{At: d.varint(), Weight: d.varint(), ID: d.uvarint()}
			}
		}
		if d.err != nil {
			break
		}
		if r.rule == "" {
			d.fail("empty rule ID")
			break
		}
		if msg := checkState(&r.st); msg != "" {
			d.fail(msg)
			break
		}
		recs = append(recs, r)
	}
	if d.err != nil {
		return h, nil, fmt.Errorf("%w: record %d: %v", errBadFile, len(recs), d.err)
	}
	if len(d.b) != 0 {
		return h, nil, fmt.Errorf("%w: %d bytes after the last record", errBadFile, len(d.b))
	}
	return h, recs, nil
}

// checkState returns what is wrong with a state read from a state file,
// or "" when no algorithm rules it out. The records do not say their
// algorithm, so it checks what holds for all of them: no last decision
// after latestInstant (every decision of the key, clamped to it, would
// fail); A (a TAT, a window index, a count or a sum of units) is never
// negative; the variable part of a sliding log or a concurrency limit has
// its head C within it, live entries of at least one unit, and A their
// sum; and a state without one and without C (a rate's or a fixed
// window's) has no negative B (a count or a fraction). Decisions trust
// their states: a negative count would let every request through and
// report more units than the limit has.
func checkState(st *algo.State) string {
	if st.Last > latestInstant {
		return "decided past the latest instant a state can hold"
	}
	if st.A < 0 {
		return "negative count"
	}
	if st.Ext == nil {
		if st.B < 0 && st.C == 0 {
			return "negative count"
		}
		return ""
	}
	if st.C < 0 || st.C > int64(len(st.Ext.Entries)) {
		return "entry head out of range"
	}
	var sum int64
	for _, e := range st.Ext.Entries[st.C:] {
		if e.Weight < 1 || sum > math.MaxInt64-e.Weight {
			return "bad entry weight"
		}
		sum += e.Weight
	}
	if sum != st.A {
		return "entries do not add up to their count"
	}
	return ""
}

// decoder reads varints and strings, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(msg string) {
	if d.err == nil {
		d.err = errors.New(msg)
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	n := d.uvarint()
	if n > maxStrLen || n > uint64(len(d.b)) {
		d.fail("bad string length")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

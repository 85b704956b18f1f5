package memstore

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
)

// The state file is a fixed header followed by the body:
//
//	magic   [8]byte  "FGMSTATE"
//	version uint32   (little endian, like every integer of the header)
//	crc     uint32   CRC-32C (Castagnoli) of the body
//	length  uint64   the body's length in bytes
//	count   uint64   the number of records in the body
//	taken   int64    Unix ns at which the snapshot began
//
// and count records, each: rule ID and key (uvarint length, bytes), the
// state's Last, A, B, C and the expiry (varints), the number of Ext entries
// (uvarint) and each entry's At, Weight (varints) and ID (uvarint).
const (
	fileMagic   = "FGMSTATE"
	fileVersion = 1
	headerSize  = 8 + 4 + 4 + 8 + 8 + 8
	maxStrLen   = 1 << 20
	// minRecord is the fewest bytes a record takes: two string lengths,
	// five varints and an entry count.
	minRecord = 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errBadFile marks a state file that was read but does not check out.
var errBadFile = errors.New("memstore: state file rejected")

// Snapshot writes every live key to the state file now: to a temporary
// file in the same directory, synced, then renamed over the state file and
// the directory synced. It does nothing without Options.StatePath.
func (s *Store) Snapshot() error {
	if s.opts.StatePath == "" {
		return nil
	}
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	began := time.Now().UnixNano()
	err := s.writeSnapshot(began)
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

func (s *Store) writeSnapshot(began int64) (err error) {
	path := s.opts.StatePath
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
		crc    uint32
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
			if e.rule == nil || e.exp <= now {
				continue
			}
			buf = appendRecord(buf, e)
			count++
		}
		sh.mu.Unlock()
		crc = crc32.Update(crc, castagnoli, buf)
		length += uint64(len(buf))
		if _, err = bw.Write(buf); err != nil {
			return err
		}
	}
	if err = bw.Flush(); err != nil {
		return err
	}
	hdr := make([]byte, 0, headerSize)
	hdr = append(hdr, fileMagic...)
	hdr = binary.LittleEndian.AppendUint32(hdr, fileVersion)
	hdr = binary.LittleEndian.AppendUint32(hdr, crc)
	hdr = binary.LittleEndian.AppendUint64(hdr, length)
	hdr = binary.LittleEndian.AppendUint64(hdr, count)
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(began))
	if _, err = f.WriteAt(hdr, 0); err != nil {
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
	// Make the rename itself durable.
	if d, derr := os.Open(filepath.Dir(path)); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
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
	exp       int64
}

// load reads the state file. It decodes and checks all of it before it
// stores a single key.
func (s *Store) load() {
	// Temporary files of snapshots cut short by a crash.
	if stale, err := filepath.Glob(tempPattern(s.opts.StatePath)); err == nil {
		for _, f := range stale {
			os.Remove(f)
		}
	}
	data, err := os.ReadFile(s.opts.StatePath)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var recs []record
	if err == nil {
		recs, err = decodeFile(data)
	}
	if err != nil {
		s.loadErr = fmt.Errorf("memstore: load %s: %w", s.opts.StatePath, err)
		s.log.Warn("memstore: state file ignored, starting empty", "path", s.opts.StatePath, "err", err)
		return
	}
	now := s.now()
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
		s.insert(sh, h, rule, r.key, r.st, r.exp, now, noPins)
		s.loaded++
	}
}

// decodeFile checks the header and checksum and decodes every record.
func decodeFile(data []byte) ([]record, error) {
	if len(data) < headerSize {
		return nil, fmt.Errorf("%w: %d bytes is shorter than the header", errBadFile, len(data))
	}
	if string(data[:8]) != fileMagic {
		return nil, fmt.Errorf("%w: not a memstore state file (bad magic)", errBadFile)
	}
	if v := binary.LittleEndian.Uint32(data[8:]); v != fileVersion {
		return nil, fmt.Errorf("%w: unsupported version %d", errBadFile, v)
	}
	crc := binary.LittleEndian.Uint32(data[12:])
	length := binary.LittleEndian.Uint64(data[16:])
	count := binary.LittleEndian.Uint64(data[24:])
	body := data[headerSize:]
	if length != uint64(len(body)) {
		return nil, fmt.Errorf("%w: body is %d bytes, header says %d (torn or truncated)", errBadFile, len(body), length)
	}
	if got := crc32.Checksum(body, castagnoli); got != crc {
		return nil, fmt.Errorf("%w: checksum mismatch (%08x, header says %08x)", errBadFile, got, crc)
	}
	if count > uint64(len(body))/minRecord {
		return nil, fmt.Errorf("%w: %d records cannot fit in %d bytes", errBadFile, count, len(body))
	}
	d := decoder{b: body}
	recs := make([]record, 0, count)
	for range count {
		var r record
		r.rule = d.str()
		r.key = d.str()
		r.st.Last, r.st.A, r.st.B, r.st.C = d.varint(), d.varint(), d.varint(), d.varint()
		r.exp = d.varint()
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
		recs = append(recs, r)
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: record %d: %v", errBadFile, len(recs), d.err)
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last record", errBadFile, len(d.b))
	}
	return recs, nil
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

package memstore

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// fileWith builds a state file around body, with a correct header.
func fileWith(body []byte, count uint64) []byte {
	b := appendHeader(nil, header{taken: 1}, crc32.Checksum(body, castagnoli), uint64(len(body)), count)
	return append(b, body...)
}

// fileWithV1 builds a state file of version 1 around body, whose records
// must be of that version.
func fileWithV1(body []byte, count uint64, taken int64) []byte {
	b := make([]byte, 0, headerSize1+len(body))
	b = append(b, fileMagic...)
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(body, castagnoli))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(body)))
	b = binary.LittleEndian.AppendUint64(b, count)
	b = binary.LittleEndian.AppendUint64(b, uint64(taken))
	return append(b, body...)
}

// FuzzDecodeFile feeds state-file bodies behind a valid header (so that
// the checksum does not stop them) to the decoder: it must never panic,
// and what it accepts must encode back to the same bytes.
func FuzzDecodeFile(f *testing.F) {
	e := entry{rule: limiter.PlaceholderRule("r.1"), key: "k", exp: 99, deny: 98,
		st: algo.State{Last: 5, A: 2, B: 2, C: 0, Ext: &algo.Ext{Entries: []algo.Entry{{At: 1, Weight: 2, ID: 3}}}}}
	one := appendRecord(nil, &e)
	f.Add(one, uint64(1))
	f.Add(append(one, one...), uint64(2))
	f.Add(one[:len(one)-1], uint64(1))
	f.Add([]byte{}, uint64(0))
	f.Fuzz(func(t *testing.T, body []byte, count uint64) {
		_, recs, err := decodeFile(fileWith(body, count))
		if err != nil {
			return
		}
		var again []byte
		for i := range recs {
			r := &recs[i]
			again = appendRecord(again, &entry{rule: limiter.PlaceholderRule(r.rule), key: r.key, st: r.st, exp: r.exp, deny: r.deny})
		}
		if string(again) != string(body) && len(recs) > 0 {
			// Varints have one canonical form, but the decoder also
			// accepts padded ones; the records must at least survive a
			// second round trip unchanged.
			_, recs2, err := decodeFile(fileWith(again, uint64(len(recs))))
			if err != nil || len(recs2) != len(recs) {
				t.Fatalf("re-encoded records do not decode: %v", err)
			}
		}
	})
}

// TestStateFileVersion1 loads a state file of the previous version: its
// records, without the deny instant, and the wall-clock instant its
// snapshot began, which it is re-based from when it lies in the future.
func TestStateFileVersion1(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC).UnixNano()
	r := ruletest.Rule(t, floodgate.Limit{Name: "w", Algorithm: floodgate.FixedWindow, Max: 5, Window: time.Hour})
	// A key that used 3 of 5 in the window of an instant an hour ahead.
	taken := now + int64(time.Hour)
	var body []byte
	body = binary.AppendUvarint(body, uint64(len(r.ID())))
	body = append(body, r.ID()...)
	body = binary.AppendUvarint(body, 1)
	body = append(body, 'k')
	for _, v := range []int64{taken, taken / int64(time.Hour), 3, 0, taken + int64(time.Hour)} { // Last, A, B, C, expiry
		body = binary.AppendVarint(body, v)
	}
	body = binary.AppendUvarint(body, 0)
	path := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(path, fileWithV1(body, 1, taken), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{StatePath: path, SnapshotInterval: -1, SweepInterval: -1,
		Now: func() int64 { return now }, Boot: func() (string, time.Duration, bool) { return "", 0, false }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st := s.Stats(); st.LoadError != nil || st.Loaded != 1 || st.Rebased != time.Hour {
		t.Fatalf("stats %+v, want the key loaded and the timeline moved an hour", st)
	}
	out := make([]floodgate.Decision, 1)
	if err := s.Decide(context.Background(), []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}, true, out); err != nil {
		t.Fatal(err)
	}
	if d := out[0]; !d.Allowed || d.Remaining != 1 {
		t.Fatalf("peek: %+v, want 3 of 5 used", d)
	}
	if st := s.Stats(); st.Clamps != 0 {
		t.Fatalf("%d clamps: the state was not re-based", st.Clamps)
	}
}

package keystore

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Record is one API key managed through the admin API.
type Record struct {
	// Name identifies the key (letters, digits, '.', '_' and '-').
	Name string `json:"name"`
	// Plan is the usage plan the key is in.
	Plan string `json:"plan"`
	// Secrets are the SHA-256 digests of the key's secrets, the current
	// one first; during a rotation the previous one follows, until its
	// NotAfter.
	Secrets []Secret `json:"secrets"`
	// Disabled keys are refused until enabled again.
	Disabled bool `json:"disabled,omitempty"`
	// Revoked keys are refused for good; the record stays for the record.
	Revoked bool `json:"revoked,omitempty"`
	// Rate, Burst and Quota, when positive, replace the plan's.
	Rate  int64 `json:"rate,omitempty"`
	Burst int64 `json:"burst,omitempty"`
	Quota int64 `json:"quota,omitempty"`
	// Generation names the counters the key counts in since its last
	// reset (0: never reset): the reset's time in Unix microseconds
	// (NextGeneration); records written before that count their resets
	// 1, 2, ... and keep the generation they are at until their next one.
	Generation int64 `json:"generation,omitempty"`
	// Created and Updated are when the key was made and last changed.
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

// Secret is one secret of a key, by its SHA-256.
type Secret struct {
	// SHA256 is the hex digest of the secret.
	SHA256 string `json:"sha256"`
	// Created is when the secret was made.
	Created time.Time `json:"created,omitzero"`
	// NotAfter, when set, is when the secret stops working (the old secret
	// of a rotation).
	NotAfter time.Time `json:"not_after,omitzero"`
}

// Active reports whether the key is accepted (neither revoked nor
// disabled).
func (r *Record) Active() bool { return !r.Revoked && !r.Disabled }

// Errors of the store's operations.
var (
	ErrNotFound = errors.New("keystore: no such key")
	ErrExists   = errors.New("keystore: a key with this name exists")
	ErrBadName  = errors.New("keystore: a key's name has 1 to 64 letters, digits, '.', '_' or '-', and is not . or ..")
	ErrRevoked  = errors.New("keystore: the key is revoked")
	ErrOverlap  = fmt.Errorf("keystore: a rotation's overlap is 0 to %v", MaxOverlap)
	// ErrFull refuses a new key when the store holds the most keys the
	// policy allows (server.admin.max_keys), revoked ones included.
	ErrFull = errors.New("keystore: the store holds its most keys (server.admin.max_keys, revoked ones included: delete those)")
	// ErrNotRevoked refuses to delete a key that is not revoked.
	ErrNotRevoked = errors.New("keystore: only a revoked key can be deleted: revoke it first")
)

// A key's secrets are bounded, so that rotating it again and again (an
// automation in a loop) cannot grow its record, the store's file and every
// instance's copy without end.
const (
	// MaxOverlap is the longest a rotation lets the older secrets work.
	MaxOverlap = 30 * 24 * time.Hour
	// MaxSecrets is how many secrets a key holds at most: the newest and
	// the older ones still in their overlap. A rotation past it ends the
	// oldest at once.
	MaxSecrets = 4
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ValidName reports whether name can name a key. "." and ".." cannot: a
// key is managed at a path that ends in its name, and a URL's dot
// segments are removed before it reaches a route.
func ValidName(name string) bool {
	return nameRE.MatchString(name) && name != "." && name != ".."
}

// NewSecret returns a new random API key ("fg_" and 43 characters, 256
// bits) and its SHA-256 in hex.
func NewSecret() (raw, sum string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("keystore: random: %w", err)
	}
	raw = "fg_" + base64.RawURLEncoding.EncodeToString(b[:])
	h := sha256.Sum256([]byte(raw))
	return raw, hex.EncodeToString(h[:]), nil
}

// NextGeneration returns the generation of a key's reset at now, the key
// being at generation prev: now in Unix microseconds, or prev + 1 when
// that is not past prev (a clock set back). A key deleted and made again
// under its name starts again at generation 0, its earlier resets
// forgotten with its record; a generation that is the reset's time keeps
// each reset's counters apart from those of the name's earlier lives,
// which may still hold counts of the period, so that every reset counts
// afresh. Microseconds stay exact where JSON numbers are read as doubles
// (jq, JavaScript).
func NextGeneration(prev int64, now time.Time) int64 {
	return max(now.UnixMicro(), prev+1)
}

// clone returns a deep copy of r.
func (r *Record) clone() Record {
	c := *r
	c.Secrets = append([]Secret(nil), r.Secrets...)
	return c
}

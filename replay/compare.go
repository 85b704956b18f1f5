package replay

import (
	"fmt"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/floodgate/floodgate/identity"
)

// Comparison is what changes when the same traffic meets another policy:
// exactly the requests one policy allows and the other refuses.
type Comparison struct {
	// Policy names the other policy; Limits is its report, as Report's.
	Policy string        `json:"policy"`
	Limits []LimitReport `json:"limits"`
	// Allowed and Denied count the other policy's decisions, Answered the
	// requests the gateway answered before any limit under it
	// (Outcome.Answered).
	Allowed  int64 `json:"allowed"`
	Denied   int64 `json:"denied"`
	Answered int64 `json:"answered"`
	// Flips counts the requests decided differently: ToDenied are allowed
	// by the first policy and refused by the other, ToAllowed the other
	// way round. Refused is refused by a limit, for a missing API key
	// (403), or by the gateway's own answer before any limit (a 400 for an
	// escaped slash under server.escaped_slash: reject, say); a request
	// each policy refuses, one way or another, is no flip.
	Flips     int64 `json:"flips"`
	ToDenied  int64 `json:"to_denied"`
	ToAllowed int64 `json:"to_allowed"`
	// Groups counts the flips by direction, limit and client, largest
	// first; GroupsLeftOut counts the flips in groups past the last one
	// listed.
	Groups        []FlipGroup `json:"groups"`
	GroupsLeftOut int64       `json:"groups_left_out,omitempty"`
}

// FlipGroup is the flips of one direction, one limit and one client.
type FlipGroup struct {
	// Direction is "to_denied" or "to_allowed".
	Direction string `json:"direction"`
	// Limit is the limit that refuses: the other policy's for to_denied,
	// the first policy's for to_allowed; "(403: API key)" for a missing
	// key, and "(400: answered before any limit)" (with the answer's
	// status) for the gateway's own answer.
	Limit  string    `json:"limit"`
	Client string    `json:"client"`
	Count  int64     `json:"count"`
	First  time.Time `json:"first"`
	Last   time.Time `json:"last"`
	// Examples are the first few flipped requests of the group, their
	// methods and paths cut to maxExampleBytes (Options.OnFlip is given
	// them whole).
	Examples []Flip `json:"examples"`
}

// Flip is one request decided differently by the two policies.
type Flip struct {
	Time      time.Time `json:"time"`
	Log       string    `json:"log"`
	Line      int64     `json:"line"`
	ClientIP  string    `json:"client_ip,omitempty"`
	Method    string    `json:"method"`
	Path      string    `json:"path"`
	Key       string    `json:"key,omitempty"`
	Direction string    `json:"direction"`
	// Limit is the limit that refuses it, as FlipGroup.Limit.
	Limit string `json:"limit"`
}

const (
	maxFlipGroups   = 10000
	maxFlipExamples = 3
	shownFlipGroups = 50
	// maxExampleBytes bounds the method and the path an example keeps:
	// a replay keeps examples of up to maxFlipGroups groups until it
	// ends, and the paths come from clients.
	maxExampleBytes = 512
)

// comparer tallies the flips between two replays of the same records.
type comparer struct {
	c      *Comparison
	names  []string
	v6bits int
	groups map[flipKey]*FlipGroup
	other  int64 // flips in groups past maxFlipGroups
}

type flipKey struct{ dir, limit, client string }

func newComparer(otherName string, names []string, v6bits int) *comparer {
	if v6bits == 0 {
		v6bits = identity.DefaultIPv6Prefix
	}
	return &comparer{c: &Comparison{Policy: otherName}, names: names, v6bits: v6bits, groups: map[flipKey]*FlipGroup{}}
}

// add compares the two decisions on rec; it returns the flip, if any.
func (cp *comparer) add(rec *Record, a, b *Outcome) *Flip {
	switch {
	case b.Denied:
		cp.c.Denied++
	case b.Answered != 0:
		cp.c.Answered++
	default:
		cp.c.Allowed++
	}
	if a.Refused() == b.Refused() {
		return nil
	}
	f := Flip{Time: time.Unix(0, rec.Time).UTC(), Line: rec.Line, Method: rec.Method, Path: rec.Path, Key: a.Match.KeyID}
	if rec.Source < len(cp.names) {
		f.Log = cp.names[rec.Source]
	}
	if rec.ClientIP.IsValid() {
		f.ClientIP = rec.ClientIP.String()
	}
	refusing := b
	if b.Refused() {
		f.Direction = "to_denied"
		cp.c.ToDenied++
	} else {
		f.Direction = "to_allowed"
		cp.c.ToAllowed++
		refusing = a
	}
	switch {
	case refusing.Answered != 0:
		f.Limit = fmt.Sprintf("(%d: answered before any limit)", refusing.Answered)
	case refusing.Denied:
		if l := refusing.Binding(); l != nil {
			f.Limit = l.Name
		}
	case refusing.Forbidden:
		f.Limit = "(403: API key)"
	}
	cp.c.Flips++
	client := rec.ClientKey // an unreadable forwarded address, as counted
	if client == "" {
		client = identity.ClientKey(rec.ClientIP, cp.v6bits)
	}
	k := flipKey{f.Direction, f.Limit, client}
	g := cp.groups[k]
	if g == nil {
		if len(cp.groups) >= maxFlipGroups {
			cp.other++
			return &f
		}
		g = &FlipGroup{Direction: k.dir, Limit: k.limit, Client: k.client, First: f.Time}
		cp.groups[k] = g
	}
	g.Count++
	g.Last = f.Time
	if len(g.Examples) < maxFlipExamples {
		ex := f
		ex.Method, ex.Path = clip(f.Method, maxExampleBytes), clip(f.Path, maxExampleBytes)
		g.Examples = append(g.Examples, ex)
	}
	return &f
}

// clip returns s cut to at most n bytes (at a character's start) with
// "…" after it, or s when it is no longer; the result is a copy, so
// that it holds no more of s than it shows.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

func (cp *comparer) finish() *Comparison {
	gs := make([]*FlipGroup, 0, len(cp.groups))
	for _, g := range cp.groups {
		gs = append(gs, g)
	}
	sort.Slice(gs, func(i, j int) bool {
		if gs[i].Count != gs[j].Count {
			return gs[i].Count > gs[j].Count
		}
		if gs[i].Direction != gs[j].Direction {
			return gs[i].Direction < gs[j].Direction
		}
		if gs[i].Limit != gs[j].Limit {
			return gs[i].Limit < gs[j].Limit
		}
		return gs[i].Client < gs[j].Client
	})
	cp.c.GroupsLeftOut = cp.other
	for i, g := range gs {
		if i < shownFlipGroups {
			cp.c.Groups = append(cp.c.Groups, *g)
		} else {
			cp.c.GroupsLeftOut += g.Count
		}
	}
	return cp.c
}

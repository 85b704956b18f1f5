package replay

import (
	"sort"
	"time"
)

// Affected is a client or an API key the replay refused.
type Affected struct {
	// Name is the client's address (as counted: an IPv6 /64) or the key's
	// name.
	Name string `json:"name"`
	// Denied counts its refused requests; when the report tracked more
	// names than it keeps, a count may include up to Error requests of
	// others (the space-saving bound), exact when Error is 0.
	Denied int64 `json:"denied"`
	Error  int64 `json:"error,omitempty"`
	// Limit is the limit that refused it most recently.
	Limit string `json:"limit"`
	// First and Last are its first and last refused requests.
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
}

// topK counts the most frequent names in bounded memory: the space-saving
// algorithm keeps k counters, and a new name takes over the smallest one,
// inheriting its count as its possible error.
type topK struct {
	k     int
	index map[string]int
	items []topItem
}

type topItem struct {
	name        string
	count, err  int64
	limit       string
	first, last int64
}

func newTopK(k int) *topK { return &topK{k: k, index: make(map[string]int, k)} }

// add counts one refusal of name by limit at t.
func (t *topK) add(name, limit string, at int64) {
	if name == "" {
		return
	}
	if i, ok := t.index[name]; ok {
		it := &t.items[i]
		it.count++
		it.limit, it.last = limit, at
		return
	}
	if len(t.items) < t.k {
		t.index[name] = len(t.items)
		t.items = append(t.items, topItem{name: name, count: 1, limit: limit, first: at, last: at})
		return
	}
	// Take over the smallest counter (a linear scan: k is small and most
	// additions hit a name already counted).
	min := 0
	for i := range t.items {
		if t.items[i].count < t.items[min].count {
			min = i
		}
	}
	old := t.items[min]
	delete(t.index, old.name)
	t.index[name] = min
	t.items[min] = topItem{name: name, count: old.count + 1, err: old.count, limit: limit, first: at, last: at}
}

// top returns the n largest, most refused first.
func (t *topK) top(n int) []Affected {
	items := append([]topItem(nil), t.items...)
	sort.Slice(items, func(i, j int) bool {
		if items[i].count != items[j].count {
			return items[i].count > items[j].count
		}
		return items[i].name < items[j].name
	})
	if len(items) > n {
		items = items[:n]
	}
	out := make([]Affected, len(items))
	for i, it := range items {
		out[i] = Affected{Name: it.name, Denied: it.count, Error: it.err, Limit: it.limit,
			First: time.Unix(0, it.first).UTC(), Last: time.Unix(0, it.last).UTC()}
	}
	return out
}

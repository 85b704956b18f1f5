package policy

import (
	"slices"
	"strings"
)

// pathIndex finds the routes or limits a request may match by its path
// without looking at the others, so that matching costs what the path's
// length and its candidates cost, not what the file's size does. Owners
// (routes, or limits) are numbered in matching order; every list of them
// is in that order. A candidate is then checked with its whole matcher,
// so the index decides nothing but which owners are looked at.
type pathIndex struct {
	// root holds the owners' path patterns, segment by segment.
	root trieNode
	// byRoute holds the limits without paths that name routes, by route
	// name: they match only requests on one of those routes.
	byRoute map[string][]int32
	// always holds the owners that any path may match: those without
	// paths or routes to index them by.
	always []int32
}

// trieNode is the owners whose patterns begin with the segments that lead
// to it.
type trieNode struct {
	lit  map[string]*trieNode // the next segment, literal
	star *trieNode            // the next segment, any non-empty value ("*", "{name}")
	end  []int32              // owners with a pattern that ends here
	rest []int32              // owners with a pattern that ends here with /**
}

// appendOwner appends id to a list of owners unless it ends with it.
func appendOwner(list []int32, id int32) []int32 {
	if n := len(list); n > 0 && list[n-1] == id {
		return list
	}
	return append(list, id)
}

// add indexes owner id, whose matcher is m, with routes telling whether
// m's routes are indexed (limits) or not (routes). Owners are added in
// matching order.
func (ix *pathIndex) add(id int32, m *matcher, routes bool) {
	switch {
	case len(m.paths) > 0:
		for i := range m.paths {
			ix.root.add(id, &m.paths[i])
		}
	case routes && len(m.routes) > 0:
		if ix.byRoute == nil {
			ix.byRoute = map[string][]int32{}
		}
		for _, r := range m.routes {
			ix.byRoute[r] = appendOwner(ix.byRoute[r], id)
		}
	default:
		ix.always = appendOwner(ix.always, id)
	}
}

func (n *trieNode) add(id int32, pp *pathPattern) {
	for i, seg := range pp.segs {
		if pp.any[i] {
			if n.star == nil {
				n.star = &trieNode{}
			}
			n = n.star
			continue
		}
		next := n.lit[seg]
		if next == nil {
			if n.lit == nil {
				n.lit = map[string]*trieNode{}
			}
			next = &trieNode{}
			n.lit[seg] = next
		}
		n = next
	}
	if pp.rest {
		n.rest = appendOwner(n.rest, id)
	} else {
		n.end = appendOwner(n.end, id)
	}
}

// nextSegment splits off the first segment of what is left of a path, as
// pathPattern.match reads it; done says that it was the last one.
func nextSegment(rest string) (seg, left string, done bool) {
	if j := strings.IndexByte(rest, '/'); j >= 0 {
		return rest[:j], rest[j+1:], false
	}
	return rest, "", true
}

// collect appends to dst the owners of patterns that the path matches
// (rest is what is left of it after the segments that led to n), in no
// particular order and possibly more than once.
func (n *trieNode) collect(dst []int32, rest string, done bool) []int32 {
	for {
		dst = append(dst, n.rest...)
		if done {
			// A pattern of no segments (none compiles to one) would match
			// only "/", which pathPattern.match reads as one empty
			// segment, so it is not looked for here.
			return append(dst, n.end...)
		}
		seg, left, last := nextSegment(rest)
		lit := n.lit[seg]
		if n.star != nil && seg != "" {
			if lit == nil {
				n, rest, done = n.star, left, last
				continue
			}
			dst = n.star.collect(dst, left, last)
		}
		if lit == nil {
			return dst
		}
		n, rest, done = lit, left, last
	}
}

// candidates appends to dst, in matching order and once each, the owners
// that a request with this path (and alt, its second reading, or "") and
// route may match.
func (ix *pathIndex) candidates(dst []int32, path, alt, route string) []int32 {
	dst = ix.root.collect(dst, path[1:], false)
	if alt != "" {
		dst = ix.root.collect(dst, alt[1:], false)
	}
	if ix.byRoute != nil {
		dst = append(dst, ix.byRoute[route]...)
	}
	dst = append(dst, ix.always...)
	slices.Sort(dst)
	return slices.Compact(dst)
}

// firstRoute returns the first route (by number) below best that rq matches
// among those whose patterns begin with the segments that led to n, or
// best.
func (p *Policy) firstRoute(n *trieNode, rest string, done bool, rq *req, best int32) int32 {
	for {
		best = p.firstOf(n.rest, rq, best)
		if done {
			return p.firstOf(n.end, rq, best)
		}
		seg, left, last := nextSegment(rest)
		lit := n.lit[seg]
		if n.star != nil && seg != "" {
			if lit == nil {
				n, rest, done = n.star, left, last
				continue
			}
			best = p.firstRoute(n.star, left, last, rq, best)
		}
		if lit == nil {
			return best
		}
		n, rest, done = lit, left, last
	}
}

// firstOf returns the first route of ids below best that rq matches, or
// best.
func (p *Policy) firstOf(ids []int32, rq *req, best int32) int32 {
	for _, id := range ids {
		if id >= best {
			break
		}
		if p.routes[id].match.match(rq) {
			return id
		}
	}
	return best
}

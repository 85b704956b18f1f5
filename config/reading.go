package config

import "strings"

// PathReading is how the gateway reads a request's path, and the path
// patterns of routes and limits, to match one with the other, as
// server.path_matching and server.format_suffix say. Package policy
// matches requests with it, and the checks of a file that ask whether a
// limit may apply on a route (a reservation that could expire in an
// overload queue) reason with it, so that the two read a path alike.
type PathReading struct {
	// FoldCase is set under path_matching: case_insensitive: paths and
	// patterns match in lower case.
	FoldCase bool
	// NoFormat is set under format_suffix: ignore: paths and patterns
	// match without the final ".format" of their last segment
	// (StripFormat).
	NoFormat bool
}

// PathReading returns how the gateway reads paths under s.
func (s *Server) PathReading() PathReading {
	return PathReading{FoldCase: s.PathMatching == PathCaseInsensitive, NoFormat: s.FormatSuffix == FormatSuffixIgnore}
}

// Path returns a cleaned path as patterns match it: without its final
// ".format" (NoFormat) and in lower case (FoldCase).
func (r PathReading) Path(p string) string {
	if r.NoFormat {
		p = StripFormat(p)
	}
	if r.FoldCase {
		p = strings.ToLower(p)
	}
	return p
}

// Pattern returns a path pattern (CheckPathPattern) as it matches the
// paths Path returns: without its trailing slash (TrimPathPattern), its
// last segment without its ".format" (NoFormat; a final /** is kept, as
// it matches whatever follows), in lower case (FoldCase).
func (r PathReading) Pattern(p string) string {
	p = TrimPathPattern(p)
	if r.NoFormat && !strings.HasSuffix(p, "/**") {
		p = StripFormat(p)
	}
	if r.FoldCase {
		p = strings.ToLower(p)
	}
	return p
}

// StripFormat returns a cleaned path without the final ".format" of its
// last segment ("/login.json" is "/login"), as Rails routes "/login(.:format)":
// the text from the segment's first dot on, but for a dot that starts it.
// From the first dot, not the last: Spring's suffix pattern matching
// serves "/login.a.json" as "/login" (its route is "/login.*"), so the
// text after the last dot alone ("/login.a") would let a limit on
// "/login" be dodged by a second dot. A segment that is nothing but its
// suffix (".env") is kept.
func StripFormat(p string) string {
	last := strings.LastIndexByte(p, '/')
	seg := p[last+1:]
	if seg == "" {
		return p
	}
	if dot := strings.IndexByte(seg[1:], '.'); dot >= 0 {
		return p[:last+2+dot]
	}
	return p
}

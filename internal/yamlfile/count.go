package yamlfile

import (
	"bytes"
	"strings"
)

// MaxTreeNodes bounds the YAML nodes of a file (keys, values, lists and
// mappings; an alias is one node) that Read lets the parser build. The
// parser builds a file's whole tree, about 250 bytes a node, before any
// value is looked at, so the nodes are counted before parsing, by
// treeNodes: an over-estimate, by 1.5 to 2.5 times for the policy and
// descriptor files seen (more for long prose outside comments). A file of
// MaxNodes values written out has at most 2*MaxNodes+1 nodes (a key for
// each value), so the bound lets such files through; a file it refuses
// could not have been decoded within MaxNodes values, unless most of it
// were fields that are ignored.
const MaxTreeNodes = 4 * MaxNodes

// treeNodes returns an upper bound of the nodes the parser builds for
// data (the first two documents of it, which is all Read parses), without
// parsing it: every node is counted at a byte that must be in the file for
// the node to be, at most three nodes at one byte. Counting stops once the
// bound passes limit; line is then the line where it did.
//
// The count cannot tell a quoted string or a block scalar from the rest of
// the file, so the indicators in them count too: that only over-counts.
// What it relies on, from the scanner of go.yaml.in/yaml/v3:
//
//   - "#" at the start of a line or after a blank begins a comment, to the
//     end of the line, unless it is in a quoted string or a block scalar.
//     Such a line holds no token unless a quoted string ends on it, by a
//     quote: the rest of a line from "#" is skipped when it has no quote.
//   - A token begins at the start of a line, after one of - ? : , [ ] { }
//     " ' (with or without blanks between), or after blanks that follow an
//     anchor (&) or a tag (!). Elsewhere on a line, after a blank, the
//     text continues a plain scalar. Each token that begins a node (a
//     scalar, an alias, a property, [ or {) counts one.
//   - "- " is a list entry: one for the list (it may be the first entry)
//     and one more when nothing follows on the line (a null entry).
//   - ":" before a blank, or where a token begins, is a mapping's value:
//     one for the mapping (the first key of a block mapping, or a
//     single-pair mapping in a flow list), one more for a null key when
//     nothing is before it, one more for a null value when nothing follows.
//   - "?" is a key: the mapping, a null key and a null value.
//   - "{" counts two and "," one, for the null value of a flow mapping's
//     key written without ":" ({a, b}).
//   - Each document adds at most its document node and a null root: four
//     for the two documents.
func treeNodes(data []byte, limit int) (n, line int) {
	const (
		tokenAfter = "-?:,[]{}\"'" // a token may begin right after these
		emptyUpTo  = "#,]}"        // these end an empty value
	)
	i := 0
	for _, bom := range [][]byte{{0xEF, 0xBB, 0xBF}, {0xFF, 0xFE}, {0xFE, 0xFF}} {
		if bytes.HasPrefix(data, bom) {
			i = len(bom)
			break
		}
	}
	// next returns the first byte from j on that is not a NUL (the other
	// half of UTF-16's ASCII characters) and its index; 0 at the end.
	next := func(j int) (byte, int) {
		for ; j < len(data); j++ {
			if data[j] != 0 {
				return data[j], j
			}
		}
		return 0, len(data)
	}
	// blankz reports whether the byte from j on is a blank, a line break or
	// the end; rest whether, after blanks, the line ends there or one of
	// ends comes.
	blankz := func(j int) bool {
		c, _ := next(j)
		return c == 0 || isBlank(c) || isBreak(c)
	}
	rest := func(j int, ends string) bool {
		for {
			c, k := next(j)
			if c == 0 || isBreak(c) || strings.IndexByte(ends, c) >= 0 {
				return true
			}
			if !isBlank(c) {
				return false
			}
			j = k + 1
		}
	}
	n, line = 4, 1
	lineStart := true
	var prev byte                   // the last byte on the line that is not a blank; 0 at its start
	blank := false                  // a blank came after prev
	prop, afterProp := false, false // the word now read, the last word before blanks, began with & or !
	for ; i < len(data); i++ {
		c := data[i]
		switch {
		case c == 0:
			continue
		case isBreak(c):
			if c == '\n' || (c == '\r' && (i+1 == len(data) || data[i+1] != '\n')) {
				line++
			}
			lineStart, prev, blank, prop, afterProp = true, 0, false, false, false
			continue
		case isBlank(c):
			if !blank {
				afterProp = prop
			}
			blank = true
			continue
		}
		if c == '#' && (lineStart || blank) {
			// A comment, unless in a quoted string; one that ends on
			// this line is ended by a quote.
			j := i + 1
			for j < len(data) && !isBreak(data[j]) && data[j] != '"' && data[j] != '\'' {
				j++
			}
			if j == len(data) || isBreak(data[j]) {
				i = j - 1
				continue
			}
		}
		start := lineStart || (prev != 0 && strings.IndexByte(tokenAfter, prev) >= 0) || (blank && afterProp)
		w := 0
		switch c {
		case '?':
			w = 3
		case '{':
			w = 2
		case '[', ',':
			w = 1
		case '-':
			if blankz(i + 1) {
				w = 1
				if rest(i+1, "#") {
					w++
				}
			} else if start {
				w = 1
			}
		case ':':
			if start || blankz(i+1) {
				w = 1
				if lineStart || (prev != 0 && strings.IndexByte("[{,?-", prev) >= 0) {
					w++
				}
				if rest(i+1, emptyUpTo) {
					w++
				}
			}
		default:
			if start {
				w = 1
			}
		}
		if lineStart || blank || start {
			prop = c == '&' || c == '!'
		}
		lineStart, prev, blank = false, c, false
		if n += w; n > limit {
			return n, line
		}
	}
	return n, line
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// isBreak reports whether c is a line break or the last byte of one (NEL,
// LS and PS are breaks to YAML; taking other characters ending in those
// bytes for breaks only counts more).
func isBreak(c byte) bool { return c == '\n' || c == '\r' || c == 0x85 || c == 0xA8 || c == 0xA9 }

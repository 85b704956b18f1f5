package yamlfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// MaxFileSize is the largest file Read accepts.
const MaxFileSize = 16 << 20

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// syntaxError turns a YAML parser error into a problem. The parser reports
// the line of the block in which it failed.
func syntaxError(name string, err error) Errors {
	e := &Error{File: name, Msg: "YAML syntax: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Column = 1
		e.Msg = "YAML syntax (in the block starting here): " + strings.TrimPrefix(err.Error(), m[0])
	}
	return Errors{e}
}

// badCharacter places the first byte of data (a file in UTF-8, which is
// what a file without a UTF-16 byte order mark is to the parser) that is
// not UTF-8 or is a character YAML does not allow, which the parser
// refuses without saying where; nil when there is none.
func badCharacter(name string, data []byte) *Error {
	if bytes.HasPrefix(data, []byte{0xFF, 0xFE}) || bytes.HasPrefix(data, []byte{0xFE, 0xFF}) {
		return nil // UTF-16: the parser reads it as such
	}
	line, col := 1, 1
	for i := len(bomUTF8(data)); i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		var msg string
		switch {
		case r == utf8.RuneError && size <= 1:
			msg = fmt.Sprintf("the file is not UTF-8: invalid byte 0x%02x", data[i])
		case !(r == 0x09 || r == 0x0A || r == 0x0D || r >= 0x20 && r <= 0x7E || r == 0x85 ||
			r >= 0xA0 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF):
			msg = fmt.Sprintf("control character %U is not allowed", r)
		}
		if msg != "" {
			return &Error{File: name, Line: line, Column: col, Msg: "YAML syntax: " + msg}
		}
		i += size
		switch {
		case r == '\r' && i < len(data) && data[i] == '\n':
			// one line break with the \n that follows
		case r == '\n' || r == '\r' || r == 0x85 || r == 0x2028 || r == 0x2029:
			line, col = line+1, 1
		default:
			col++
		}
	}
	return nil
}

func bomUTF8(data []byte) []byte {
	if bytes.HasPrefix(data, []byte{0xEF, 0xBB, 0xBF}) {
		return data[:3]
	}
	return nil
}

// Read parses data, the contents of the file name (used in messages), as
// one YAML document and returns its root node. A file larger than
// MaxFileSize, with more than MaxTreeNodes YAML nodes (as counted before
// parsing, so that a file of a few bytes a node cannot make the parser
// build a tree of gigabytes), with a syntax error, with more than one
// document or with nothing in it has that one problem instead.
func Read(name string, data []byte) (*yaml.Node, Errors) {
	if len(data) > MaxFileSize {
		return nil, tooLarge(name)
	}
	if n, line := treeNodes(data, MaxTreeNodes); n > MaxTreeNodes {
		return nil, Errors{{File: name, Line: line, Column: 1, Msg: fmt.Sprintf(
			"too many YAML nodes: the file has more than %d keys, values and list entries by this line "+
				"(counted before parsing; a file may hold %d values)", MaxTreeNodes, MaxNodes)}}
	}
	if e := badCharacter(name, data); e != nil {
		return nil, Errors{e}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, Errors{{File: name, Msg: "the file is empty"}}
		}
		return nil, syntaxError(name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, Errors{{File: name, Line: extra.Line, Column: extra.Column, Msg: "more than one YAML document; write one"}}
	} else if !errors.Is(err, io.EOF) {
		return nil, syntaxError(name, err)
	}
	root := Resolve(&doc)
	if root == nil || IsNull(root) {
		return nil, Errors{{File: name, Msg: "the file is empty"}}
	}
	return root, nil
}

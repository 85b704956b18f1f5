package yamlfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

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

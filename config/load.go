package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// MaxFileSize is the largest configuration file Load and Parse accept.
const MaxFileSize = 16 << 20

// MaxErrors is the most problems reported for one file; a last item says
// how many more there were.
const MaxErrors = 200

// Load reads, decodes and validates the file at path. On an invalid file
// the error is an Errors value holding every problem.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parse(path, data, filepath.Dir(path))
}

// Parse decodes and validates data as the file name (used in messages).
// Relative paths in the file (JWT keys) are resolved against the directory
// of name.
func Parse(name string, data []byte) (*File, error) {
	return parse(name, data, filepath.Dir(name))
}

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

func parse(name string, data []byte, dir string) (*File, error) {
	if len(data) > MaxFileSize {
		return nil, Errors{{File: name, Msg: fmt.Sprintf("file is larger than %d bytes", MaxFileSize)}}
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
	root := resolve(&doc)
	if root == nil || isNull(root) {
		return nil, Errors{{File: name, Msg: "the file is empty"}}
	}

	f := &File{Path: name}
	setDefaults(f)
	d := &decoder{file: name, pos: map[string]Pos{}}
	d.decode(root, reflect.ValueOf(f).Elem(), "")
	if d.nodes > maxNodes {
		// Validating a partial file of this size says nothing useful.
		for _, e := range d.errs {
			if strings.Contains(e.Msg, "once its aliases are expanded") {
				return nil, Errors{e}
			}
		}
	}
	f.pos = d.pos
	v := &validator{f: f, dir: dir, errs: d.errs}
	v.validate()
	if len(v.errs) > 0 {
		errs := v.errs.sort()
		if len(errs) > MaxErrors {
			more := len(errs) - MaxErrors
			errs = append(errs[:MaxErrors:MaxErrors], &Error{File: name, Msg: fmt.Sprintf("and %d more problems", more)})
		}
		return nil, errs
	}
	return f, nil
}

// Defaults of the server section.
const (
	DefaultListen       = ":8080"
	DefaultAdminListen  = "127.0.0.1:9090"
	DefaultStoreTimeout = 5 * time.Millisecond
	DefaultIPv6Prefix   = 64
	DefaultAPIKeyHeader = "x-api-key"
	DefaultJWTLeeway    = 10 * time.Second
)

func setDefaults(f *File) {
	f.Version = 1
	f.Server = Server{
		Listen:       DefaultListen,
		AdminListen:  DefaultAdminListen,
		Store:        "memory",
		StoreTimeout: DefaultStoreTimeout,
		Instances:    1,
		Headers:      Headers{RateLimit: true},
		IPv6Prefix:   DefaultIPv6Prefix,
		APIKeyHeader: DefaultAPIKeyHeader,
		Upstream: Upstream{
			Timeout:     30 * time.Second,
			DialTimeout: 5 * time.Second,
			IdleTimeout: 90 * time.Second,
		},
	}
}

func reflectValue(p any) reflect.Value { return reflect.ValueOf(p).Elem() }

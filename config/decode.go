package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// decoder turns a yaml.Node tree into the File structs by reflection,
// recording the position of every value it sees and collecting every
// problem instead of stopping at the first.
type decoder struct {
	file string
	errs Errors
	pos  map[string]Pos
	// nodes counts the values decoded, aliases expanded: a few aliases
	// can name a huge tree, which must not hang the decoder.
	nodes int
}

// maxNodes bounds the values of one file, aliases expanded.
const maxNodes = 1 << 18

// nodeDecoder is implemented by field types with their own YAML shape (a
// key that is a string or a list, a delay that is a number or "nodelay").
type nodeDecoder interface {
	decodeNode(d *decoder, n *yaml.Node, path string)
}

var (
	durationType    = reflect.TypeOf(time.Duration(0))
	nodeDecoderType = reflect.TypeOf((*nodeDecoder)(nil)).Elem()
)

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	e := &Error{File: d.file, Field: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	d.errs = append(d.errs, e)
}

// resolve follows aliases and unwraps the document node.
func resolve(n *yaml.Node) *yaml.Node {
	for depth := 0; n != nil && depth < 32; depth++ {
		switch n.Kind {
		case yaml.AliasNode:
			n = n.Alias
		case yaml.DocumentNode:
			if len(n.Content) == 0 {
				return nil
			}
			n = n.Content[0]
		default:
			return n
		}
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "an unexpected node"
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// decode stores n into v (a settable value), reporting problems at path.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	n = resolve(n)
	if n == nil {
		return
	}
	if d.nodes++; d.nodes > maxNodes {
		if d.nodes == maxNodes+1 {
			d.errorf(n, path, "the file has more than %d values once its aliases are expanded", maxNodes)
		}
		return
	}
	d.pos[path] = Pos{n.Line, n.Column}
	if v.CanAddr() && v.Addr().Type().Implements(nodeDecoderType) {
		v.Addr().Interface().(nodeDecoder).decodeNode(d, n, path)
		return
	}
	if isNull(n) {
		return // keep the default
	}
	if v.Type() == durationType {
		if n.Kind != yaml.ScalarNode {
			d.errorf(n, path, "want a duration such as 500ms, 30s or 5m, got %s", kindName(n))
			return
		}
		dur, err := time.ParseDuration(n.Value)
		if err != nil || dur < 0 {
			d.errorf(n, path, "bad duration %q: want a non-negative Go duration such as 500ms, 30s, 5m or 24h", n.Value)
			return
		}
		v.SetInt(int64(dur))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.errorf(n, path, "want a list, got %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			d.decode(c, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.errorf(n, path, "want a string, got %s", kindName(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode {
			d.errorf(n, path, "want true or false, got %s", kindName(n))
			return
		}
		b, err := strconv.ParseBool(strings.ToLower(n.Value))
		if err != nil {
			d.errorf(n, path, "want true or false, got %q", n.Value)
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64, reflect.Int32:
		if n.Kind != yaml.ScalarNode {
			d.errorf(n, path, "want a whole number, got %s", kindName(n))
			return
		}
		i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 10, v.Type().Bits())
		if err != nil {
			d.errorf(n, path, "want a whole number, got %q", n.Value)
			return
		}
		v.SetInt(i)
	default:
		d.errorf(n, path, "internal: cannot decode into %s", v.Type())
	}
}

// fieldInfo is one YAML key of a struct, possibly inside an inlined struct.
type fieldInfo struct {
	name  string
	index []int
}

func structFields(t reflect.Type) []fieldInfo {
	var out []fieldInfo
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" || tag == "" {
			continue
		}
		name, opt, _ := strings.Cut(tag, ",")
		if opt == "inline" {
			for _, sub := range structFields(f.Type) {
				sub.index = append([]int{i}, sub.index...)
				out = append(out, sub)
			}
			continue
		}
		out = append(out, fieldInfo{name: name, index: []int{i}})
	}
	return out
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a mapping, got %s", kindName(n))
		return
	}
	fields := structFields(v.Type())
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := resolve(n.Content[i]), n.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode {
			d.errorf(n.Content[i], path, "want a field name, got %s", kindName(n.Content[i]))
			continue
		}
		if k.Value == "<<" {
			d.errorf(k, path, "merge keys (<<) are not supported; write the fields out")
			continue
		}
		fp := join(path, k.Value)
		var fi *fieldInfo
		for j := range fields {
			if fields[j].name == k.Value {
				fi = &fields[j]
				break
			}
		}
		if fi == nil {
			d.errorf(k, fp, "unknown field%s", suggest(k.Value, fields))
			continue
		}
		if seen[k.Value] {
			d.errorf(k, fp, "field given twice")
			continue
		}
		seen[k.Value] = true
		d.decode(val, v.FieldByIndex(fi.index), fp)
	}
}

// suggest names the known field closest to an unknown one, if any is close.
func suggest(name string, fields []fieldInfo) string {
	best, bestD := "", 3
	for _, f := range fields {
		if dist := editDistance(name, f.name); dist < bestD {
			best, bestD = f.name, dist
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between two short strings.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

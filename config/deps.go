package config

import (
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate/floodgate/internal/yamlfile"
)

// DependentFiles returns the files that the policy file name, whose
// contents are data, names and reads as part of it: the JWT key file and
// key set of server.user.jwt, resolved against the directory of name as
// Parse resolves them. It reads only those fields and reports no
// problems: a file that does not decode, or whose fields are not
// strings, names none. A watcher of a file that Parse rejected follows
// these, so that the file is tried again when one of them changes.
func DependentFiles(name string, data []byte) []string {
	root, errs := yamlfile.Read(name, data)
	if errs != nil {
		return nil
	}
	jwt := field(field(field(root, "server"), "user"), "jwt")
	var files []string
	for _, k := range []string{"key_file", "jwks_file"} {
		if n := field(jwt, k); n != nil && n.Kind == yaml.ScalarNode && n.Value != "" {
			p := n.Value
			if !filepath.IsAbs(p) {
				p = filepath.Join(filepath.Dir(name), p)
			}
			files = append(files, p)
		}
	}
	return files
}

// field returns the value of key in the mapping n (aliases followed), or
// nil.
func field(n *yaml.Node, key string) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			v := n.Content[i+1]
			for v != nil && v.Kind == yaml.AliasNode {
				v = v.Alias
			}
			return v
		}
	}
	return nil
}

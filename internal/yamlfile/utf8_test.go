package yamlfile

import "testing"

// TestNotUTF8IsPlaced: a file that is valid YAML but for a byte that is
// not UTF-8 (a Latin-1 name, a truncated character) is refused at the line
// and column of that byte, after a UTF-8 byte order mark, CRLF line ends
// and characters of several bytes, so that the writer can find it; so is
// a control character, even in a comment.
func TestNotUTF8IsPlaced(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"limits:\n  - name: caf\xe9\n", "f.yaml:2:14: YAML syntax: the file is not UTF-8: invalid byte 0xe9"},
		{"\xef\xbb\xbfa: 1\r\nb: \"é\"\r\nc: x\xc3\n", "f.yaml:3:5: YAML syntax: the file is not UTF-8: invalid byte 0xc3"},
		{"a: ééé \xff\n", "f.yaml:1:8: YAML syntax: the file is not UTF-8: invalid byte 0xff"},
		{"a: 1\n# note\x01\n", "f.yaml:2:7: YAML syntax: control character U+0001 is not allowed"},
	} {
		root, errs := Read("f.yaml", []byte(c.src))
		if root != nil || len(errs) != 1 || errs.Error() != c.want {
			t.Errorf("%q: %v, want %s", c.src, errs, c.want)
		}
	}
}

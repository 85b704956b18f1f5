package yamlfile

import (
	"reflect"
	"testing"
)

// Decoding a mapping into a struct costs the same whatever fields the
// struct has beyond the ones written: the fields of a struct type are
// worked out once, not at every mapping (a directory of descriptor files
// decodes hundreds of thousands of them).
func TestDecodeStructCostIsThatOfItsKeys(t *testing.T) {
	type small struct {
		A string `yaml:"a"`
		B string `yaml:"b"`
	}
	type wide struct {
		A string `yaml:"a"`
		B string `yaml:"b"`
		C string `yaml:"c"`
		D string `yaml:"d"`
		E string `yaml:"e"`
		F string `yaml:"f"`
		G string `yaml:"g"`
		H string `yaml:"h"`
		I string `yaml:"i"`
		J string `yaml:"j"`
		K string `yaml:"k"`
		L string `yaml:"l"`
	}
	root, errs := Read("f.yaml", []byte("a: x\n"))
	if errs != nil {
		t.Fatal(errs)
	}
	allocs := func(v any) float64 {
		return testing.AllocsPerRun(100, func() {
			d := NewDecoder("f.yaml", nil)
			d.Decode(root, reflect.ValueOf(v).Elem(), "")
			if p := d.Problems(); p != nil {
				t.Fatal(p)
			}
		})
	}
	s, w := allocs(&small{}), allocs(&wide{})
	if w != s {
		t.Errorf("decoding one key into a struct of 12 fields allocates %v times, into one of 2 fields %v times", w, s)
	}
}

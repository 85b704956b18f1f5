package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// problem is the first thing in a body that breaks the key rule.
type problem int

const (
	noProblem problem = iota
	duplicate
	unknown
	tooDeep
)

// refCheck is checkKeys written the slow, obvious way, over the tokens of
// encoding/json, for FuzzCheckKeys to compare with: the first key in
// document order that is a duplicate (as encoding/json decodes keys) or,
// in an object of sh's fields, not one of their exact names.
func refCheck(dec *json.Decoder, sh *shape, depth int) (problem, error) {
	tok, err := dec.Token()
	if err != nil {
		return 0, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return noProblem, nil
	}
	if depth >= maxDepth {
		return tooDeep, nil
	}
	if d == '[' {
		var elem *shape
		if sh != nil && sh.array {
			elem = sh.elem
		}
		for dec.More() {
			if p, err := refCheck(dec, elem, depth+1); p != noProblem || err != nil {
				return p, err
			}
		}
		_, err := dec.Token()
		return noProblem, err
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return 0, err
		}
		key := tok.(string)
		var sub *shape
		if sh != nil && sh.object {
			i := sh.lookup([]byte(key))
			if i < 0 {
				return unknown, nil
			}
			sub = sh.fields[i].shape
		}
		if seen[key] {
			return duplicate, nil
		}
		seen[key] = true
		if p, err := refCheck(dec, sub, depth+1); p != noProblem || err != nil {
			return p, err
		}
	}
	_, err = dec.Token()
	return noProblem, err
}

// FuzzCheckKeys: on JSON that encoding/json takes, checkKeys finds the
// same first problem as refCheck, for free objects and for the check
// API's body, never fails to read it, and never panics on anything.
func FuzzCheckKeys(f *testing.F) {
	for _, s := range []string{
		`{"limit":"login","key":"a","key":"b"}`,
		`{"hits":[{"limit":"login","key":"a"},{"limit":"global","key":"a","key":"b"}]}`,
		`{"limit":"login","k\u0065y":"a","key":"b"}`,
		`{"limit":"login","KEY":"a"}`,
		`{"limit":"login","\u212aey":"a"}`,
		`{"a\"":1,"a\"":2}`,
		`{"\\":1,"\\\\":2,"\\":3}`,
		`{"a":{"a":1},"b":[{"a":1,"a":2}]}`,
		`{"a":"\"a\":1,","a":2}`,
		`{"\ud83d\ude00":1,"😀":2}`,
		`{"\ud800":1,"\udfff":2}`,
		"{\"\xff\":1,\"\xfe\":2}",
		`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"a":11}`,
		` {"hits" : [ ] , "limit" : null } `,
		`"\u0022"`, `-1.5e+3`, `true`, `{"a":tru}`, `{"a"`, `{"a":"\`,
	} {
		f.Add(s)
	}
	check := shapeFor(reflect.TypeOf(&wireRequest{}))
	f.Fuzz(func(t *testing.T, body string) {
		b := []byte(body)
		for _, sh := range []*shape{nil, check} {
			err := checkKeys(b, sh, 0)
			if !json.Valid(b) {
				continue // anything but a panic
			}
			var ef *errField
			if errors.As(err, &ef) {
				// A key that is not exact text needs bytes that are not
				// UTF-8 or a \u escape (of a lone surrogate); refCheck
				// would see U+FFFD.
				if utf8.Valid(b) && !bytes.Contains(b, []byte(`\u`)) {
					t.Fatalf("%q: %v, with every key exact text", body, err)
				}
				continue
			}
			dec := json.NewDecoder(bytes.NewReader(b))
			want, rerr := refCheck(dec, sh, 0)
			if rerr != nil {
				t.Fatalf("%q: refCheck: %v", body, rerr)
			}
			var ke *keyError
			got := noProblem
			switch {
			case err == nil:
			case errors.Is(err, errDeep):
				got = tooDeep
			case errors.As(err, &ke) && ke.dup:
				got = duplicate
			case errors.As(err, &ke):
				got = unknown
			default:
				t.Fatalf("%q: valid JSON, and checkKeys says %v", body, err)
			}
			if got != want {
				t.Fatalf("%q (shape %v): checkKeys %v (%v), refCheck %v", body, sh != nil, got, err, want)
			}
		}
	})
}

// TestShapes: the shapes of the bodies are their structs' JSON fields,
// embedded ones included, so that a field added to a body is allowed by
// its tag alone.
func TestShapes(t *testing.T) {
	t.Parallel()
	names := func(sh *shape) string {
		var out []string
		for _, f := range sh.fields {
			out = append(out, f.name)
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		v    any
		want string
	}{
		{&wireRequest{}, "hits,limit,key,cost"},
		{&wireReserve{}, "hits,ttl,limit,key,cost"},
		{&wireSettle{}, "reservation,actual,cancel"},
		{&reservation{}, "id,hits"},
	} {
		sh := shapeFor(reflect.TypeOf(c.v))
		if got := names(sh); !sh.object || got != c.want {
			t.Errorf("%T: %s, want %s", c.v, got, c.want)
		}
	}
	hits := shapeFor(reflect.TypeOf(&wireRequest{})).fields[0].shape
	if !hits.array || names(hits.elem) != "limit,key,cost" {
		t.Errorf("hits: %+v", hits)
	}
	tok := shapeFor(reflect.TypeOf(&reservation{})).fields[1].shape
	if !tok.array || names(tok.elem) != "l,k,c,r" {
		t.Errorf("a token's hits: %+v", tok)
	}
}

// BenchmarkCheckKeys is the key check alone, on the bodies of
// BenchmarkCheckHandlerOneHit and BenchmarkCheckHandlerBatch.
func BenchmarkCheckKeys(b *testing.B) {
	sh := shapeFor(reflect.TypeOf(&wireRequest{}))
	for _, c := range []struct{ name, body string }{
		{"one hit", `{"limit":"login","key":"203.0.113.7","cost":1}`},
		{"batch", `{"hits":[{"limit":"login","key":"user-42","cost":1},{"limit":"global","key":"203.0.113.7"},{"limit":"global"}]}`},
	} {
		body := []byte(c.body)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := checkKeys(body, sh, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeBody is the decoding of a one-hit body, with the key
// check (decodeBody) and by encoding/json alone, as before it.
func BenchmarkDecodeBody(b *testing.B) {
	body := []byte(`{"limit":"login","key":"203.0.113.7","cost":1}`)
	b.Run("strict", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req wireRequest
			if err := decodeBody(body, &req, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json alone", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req wireRequest
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			dec.UseNumber()
			if err := dec.Decode(&req); err != nil {
				b.Fatal(err)
			}
			if _, err := dec.Token(); err == nil {
				b.Fatal("data after the object")
			}
		}
	})
}

package httpapi

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// reserveToken reserves one unit of login for key and returns the token
// and the token's JSON.
func reserveToken(t *testing.T, url, key string) (string, string) {
	t.Helper()
	resp, m := post(t, url+"/v1/reserve", `{"limit":"login","key":"`+key+`"}`)
	tok, _ := m["reservation"].(string)
	if resp.StatusCode != http.StatusOK || tok == "" {
		t.Fatalf("reserve %s: %d %v", key, resp.StatusCode, m)
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		t.Fatal(err)
	}
	return tok, string(raw)
}

// forge returns a token whose JSON is raw with old replaced by new.
func forge(t *testing.T, raw, old, new string) string {
	t.Helper()
	forged := strings.Replace(raw, old, new, 1)
	if forged == raw {
		t.Fatalf("token %s has no %s", raw, old)
	}
	return base64.RawURLEncoding.EncodeToString([]byte(forged))
}

// TestStrictBodies: at every endpoint, and in the reservation token, a key
// given twice in one object (also once escaped, "k\u0065y", once not) and
// a key that names a field only when case is ignored (also by Unicode
// folding: a Kelvin sign for the k) are refused with 400, the error naming
// the key and where it is, before the engine is asked or anything is
// settled; encoding/json took them, the last of a repeated key winning.
// The same key in two objects, and a lone escaped key, are taken.
func TestStrictBodies(t *testing.T) {
	t.Parallel()
	eng := newEngine(t)
	ts := httptest.NewServer(New(eng, testRules(t), Options{}))
	t.Cleanup(ts.Close)
	url := ts.URL
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	var tokens []string // reserved for the settles refused, each its own
	checks := eng.checks.Load()

	// In a settle's body TOKEN stands for a fresh reservation's token,
	// forged for the cases named here: the first string of its JSON
	// replaced by the second.
	forged := map[string][2]string{
		"token duplicate key":  {`"k":"r`, `"k":"x","k":"r`},
		"token duplicate id":   {`"id":`, `"id":"1","id":`},
		"token duplicate hits": {`"hits":`, `"hits":[],"hits":`},
		"token case":           {`"id":`, `"ID":`},
		"token case in a hit":  {`"k":`, `"K":`},
	}
	for _, c := range []struct {
		name, path, body string
		code, msg        string // msg: a part of the error's text
	}{
		{"top-level duplicate", "/v1/check", `{"limit":"login","key":"a","key":"b"}`, CodeBadJSON, `duplicate field "key"`},
		{"duplicate limit", "/v1/check", `{"limit":"nope","limit":"login","key":"a"}`, CodeBadJSON, `duplicate field "limit"`},
		{"duplicate cost", "/v1/check", `{"limit":"login","key":"a","cost":9,"cost":1}`, CodeBadJSON, `duplicate field "cost"`},
		{"duplicate hits", "/v1/check", `{"hits":[{"limit":"nope"}],"hits":[{"limit":"login","key":"a"}]}`, CodeBadJSON, `duplicate field "hits"`},
		{"duplicate in a hit", "/v1/check", `{"hits":[{"limit":"login","key":"a"},{"limit":"global","key":"a","key":"b"}]}`, CodeBadJSON, `duplicate field "hits[1].key"`},
		{"escaped duplicate", "/v1/check", `{"limit":"login","key":"a","k\u0065y":"b"}`, CodeBadJSON, `duplicate field "key"`},
		{"escaped duplicate in a hit", "/v1/check", `{"hits":[{"\u006cimit":"login","limit":"global","key":"a"}]}`, CodeBadJSON, `duplicate field "hits[0].limit"`},
		{"escaped quote in a key's value", "/v1/check", `{"limit":"login","key":"a\",\"key\":\"b","key":"c"}`, CodeBadJSON, `duplicate field "key"`},
		{"upper case", "/v1/check", `{"limit":"login","KEY":"a"}`, CodeBadJSON, `unknown field "KEY"`},
		{"title case", "/v1/check", `{"Limit":"login","key":"a"}`, CodeBadJSON, `unknown field "Limit"`},
		{"case in a hit", "/v1/check", `{"hits":[{"limit":"login","key":"a"},{"LIMIT":"login","key":"a"}]}`, CodeBadJSON, `unknown field "hits[1].LIMIT"`},
		{"case of hits", "/v1/check", `{"HITS":[{"limit":"login","key":"a"}]}`, CodeBadJSON, `unknown field "HITS"`},
		{"Kelvin sign", "/v1/check", "{\"limit\":\"login\",\"\u212aey\":\"a\"}", CodeBadJSON, "unknown field \"\u212aey\""},
		{"escaped Kelvin sign", "/v1/check", `{"limit":"login","\u212aey":"a"}`, CodeBadJSON, "unknown field \"\u212aey\""},
		{"case and duplicate", "/v1/check", `{"limit":"login","key":"a","Key":"b"}`, CodeBadJSON, `unknown field "Key"`},
		{"peek duplicate", "/v1/peek", `{"limit":"login","key":"a","key":"b"}`, CodeBadJSON, `duplicate field "key"`},
		{"peek case", "/v1/peek", `{"limit":"login","Key":"a"}`, CodeBadJSON, `unknown field "Key"`},
		{"deep arrays", "/v1/check", `{"hits":` + deep(30000) + `}`, CodeBadJSON, "nested deeper than"},
		{"deep in a key", "/v1/check", `{"limit":"login","key":` + deep(100) + `}`, CodeBadJSON, "nested deeper than"},

		{"reserve duplicate", "/v1/reserve", `{"limit":"login","key":"a","key":"b"}`, CodeBadJSON, `duplicate field "key"`},
		{"reserve duplicate ttl", "/v1/reserve", `{"limit":"login","key":"a","ttl":0.001,"ttl":60}`, CodeBadJSON, `duplicate field "ttl"`},
		{"reserve duplicate in a hit", "/v1/reserve", `{"hits":[{"limit":"login","key":"a","cost":1,"cost":2}]}`, CodeBadJSON, `duplicate field "hits[0].cost"`},
		{"reserve case", "/v1/reserve", `{"limit":"login","key":"a","TTL":60}`, CodeBadJSON, `unknown field "TTL"`},
		{"reserve case in a hit", "/v1/reserve", `{"hits":[{"limit":"login","kEy":"a"}]}`, CodeBadJSON, `unknown field "hits[0].kEy"`},

		{"settle duplicate reservation", "/v1/settle", `{"reservation":"x","reservation":"TOKEN","actual":0}`, CodeBadJSON, `duplicate field "reservation"`},
		{"settle duplicate cancel", "/v1/settle", `{"reservation":"TOKEN","cancel":false,"cancel":true}`, CodeBadJSON, `duplicate field "cancel"`},
		{"settle duplicate actual", "/v1/settle", `{"reservation":"TOKEN","actual":5,"actual":0}`, CodeBadJSON, `duplicate field "actual"`},
		{"settle duplicate in actual", "/v1/settle", `{"reservation":"TOKEN","actual":{"login":5,"login":0}}`, CodeBadJSON, `duplicate field "actual.login"`},
		{"settle escaped duplicate in actual", "/v1/settle", `{"reservation":"TOKEN","actual":{"login":5,"l\u006fgin":0}}`, CodeBadJSON, `duplicate field "actual.login"`},
		{"settle case", "/v1/settle", `{"Reservation":"TOKEN","actual":0}`, CodeBadJSON, `unknown field "Reservation"`},
		{"settle case of actual", "/v1/settle", `{"reservation":"TOKEN","ACTUAL":0}`, CodeBadJSON, `unknown field "ACTUAL"`},
		{"settle trailing data", "/v1/settle", `{"reservation":"TOKEN","actual":0} {"x":1}`, CodeBadJSON, "data after the object"},

		{"token duplicate key", "/v1/settle", `{"reservation":"TOKEN","actual":0}`, CodeBadRequest, "not a token"},
		{"token duplicate id", "/v1/settle", `{"reservation":"TOKEN","actual":0}`, CodeBadRequest, "not a token"},
		{"token duplicate hits", "/v1/settle", `{"reservation":"TOKEN","actual":0}`, CodeBadRequest, "not a token"},
		{"token case", "/v1/settle", `{"reservation":"TOKEN","actual":0}`, CodeBadRequest, "not a token"},
		{"token case in a hit", "/v1/settle", `{"reservation":"TOKEN","actual":0}`, CodeBadRequest, "not a token"},
	} {
		body := c.body
		if strings.Contains(body, "TOKEN") {
			key := "r" + strconv.Itoa(len(tokens))
			tok, raw := reserveToken(t, url, key)
			tokens = append(tokens, tok)
			if f, ok := forged[c.name]; ok {
				tok = forge(t, raw, f[0], f[1])
			}
			body = strings.Replace(body, "TOKEN", tok, 1)
		}
		resp, m := post(t, url+c.path, body)
		msg, _ := m["error"].(string)
		if resp.StatusCode != http.StatusBadRequest || m["code"] != c.code || !strings.Contains(msg, c.msg) {
			t.Errorf("%s: %s %.100s: %d %v; want 400 %s with %s", c.name, c.path, body, resp.StatusCode, m, c.code, c.msg)
		}
	}
	if n := eng.checks.Load() - checks - int64(len(tokens)); n != 0 {
		t.Errorf("refused bodies reached the engine %d times", n)
	}
	peek := func(key string) float64 {
		t.Helper()
		_, m := post(t, url+"/v1/peek", `{"limit":"login","key":"`+key+`"}`)
		r, _ := m["remaining"].(float64)
		return r
	}
	for key, want := range map[string]float64{"a": 2, "b": 2, "c": 2} {
		if got := peek(key); got != want {
			t.Errorf("login/%s after the refused bodies: %v left, want %v", key, got, want)
		}
	}
	for i := range tokens {
		if got := peek("r" + strconv.Itoa(i)); got != 1 {
			t.Errorf("login/r%d after its refused settle: %v left, want 1 (its reservation held)", i, got)
		}
	}

	// Taken: one key in two objects, a lone escaped key, a key's value
	// that spells a key, and the tokens the refused settles named.
	type taken struct{ name, path, body, key string }
	cases := []taken{
		{"one key in two hits", "/v1/check", `{"hits":[{"limit":"login","key":"d"},{"limit":"global","key":"d"}]}`, "d"},
		{"escaped key alone", "/v1/check", `{"limit":"login","k\u0065y":"e"}`, "e"},
		{"a value that spells a key", "/v1/check", `{"limit":"login","key":"\"key\":\"x\""}`, `"key":"x"`},
	}
	for i, tok := range tokens {
		actual := `{"login":0}`
		if i%2 == 1 {
			actual = `{"l\u006fgin":0}` // a limit's name escaped, alone
		}
		cases = append(cases, taken{"settle", "/v1/settle", `{"reservation":"` + tok + `","actual":` + actual + `}`, "r" + strconv.Itoa(i)})
	}
	for _, c := range cases {
		resp, m := post(t, url+c.path, c.body)
		ds, _ := m["decisions"].([]any)
		if resp.StatusCode != http.StatusOK || len(ds) == 0 || ds[0].(map[string]any)["key"] != c.key {
			t.Errorf("%s: %s %s: %d %v; want 200 for key %q", c.name, c.path, c.body, resp.StatusCode, m, c.key)
		}
	}
	for key, want := range map[string]float64{"d": 1, "e": 1, "r0": 2, "r1": 2} {
		if got := peek(key); got != want {
			t.Errorf("login/%s after the bodies taken: %v left, want %v", key, got, want)
		}
	}
}

// TestOneStrictDecoder: no file of the package but strict.go decodes JSON
// itself, so that every body and token goes through decodeBody's rule.
func TestOneStrictDecoder(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "strict.go" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, call := range []string{"json.NewDecoder(", "json.Unmarshal("} {
			if strings.Contains(string(src), call) {
				t.Errorf("%s calls %s: decode with decodeBody or decodePart (strict.go)", f, call)
			}
		}
	}
}

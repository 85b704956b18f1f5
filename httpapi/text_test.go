package httpapi

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestKeysNeverCollide: keys that differ in bytes never share a counter.
// encoding/json would decode "\xff" and "\xfe" (and the lone surrogates
// "\ud800" and "\udfff") all to U+FFFD; they are refused with 400 and a
// reason instead, before the engine is asked, on every endpoint.
func TestKeysNeverCollide(t *testing.T) {
	t.Parallel()
	url, eng := start(t)
	for _, key := range []string{"\xff", "\xfe", "a\xc3", "\xed\xa0\x80", `\ud800`, `\udfff`, `x\ud800\u0041`, `\udc00\ud800`} {
		for _, c := range []struct{ path, body string }{
			{"/v1/check", `{"limit":"login","key":"` + key + `"}`},
			{"/v1/check", `{"hits":[{"limit":"login","key":"` + key + `"}]}`},
			{"/v1/peek", `{"limit":"login","key":"` + key + `"}`},
			{"/v1/reserve", `{"limit":"login","key":"` + key + `"}`},
			{"/v1/reserve", `{"hits":[{"limit":"` + key + `"}]}`},
		} {
			resp, m := post(t, url+c.path, c.body)
			msg, _ := m["error"].(string)
			if resp.StatusCode != http.StatusBadRequest || m["code"] != CodeBadRequest ||
				!strings.Contains(msg, "UTF-8") && !strings.Contains(msg, "surrogate") {
				t.Errorf("%s %q: %d %v, want 400 bad_request saying why", c.path, c.body, resp.StatusCode, m)
			}
		}
	}
	if n := eng.checks.Load() + eng.peeks.Load(); n != 0 {
		t.Fatalf("refused keys reached the engine %d times", n)
	}
	// What is text is kept as sent: an escape and the character it names
	// are one key; a surrogate pair is its character; different text is a
	// different counter (login allows 3 per key).
	same := []string{`\u00e9`, "é", `\u00E9`}
	for i, k := range same {
		if resp, m := post(t, url+"/v1/check", `{"limit":"login","key":"`+k+`"}`); m["remaining"] != float64(2-i) {
			t.Fatalf("key %s: %d %v, want one counter for é", k, resp.StatusCode, m)
		}
	}
	for _, k := range []string{"e\u0301", `\ud83d\ude00`, "\U0001F600", "\ufffd", `\ufffd`} {
		resp, m := post(t, url+"/v1/check", `{"limit":"login","key":"`+k+`"}`)
		if resp.StatusCode != 200 {
			t.Fatalf("key %s: %d %v", k, resp.StatusCode, m)
		}
		if k == "\U0001F600" || k == `\ufffd` {
			if m["remaining"] != float64(1) {
				t.Errorf("key %s: %v, want the counter of its escaped form", k, m)
			}
		} else if m["remaining"] != float64(2) {
			t.Errorf("key %s: %v, want a counter of its own", k, m)
		}
	}
}

// TestCostMustBeANumber: a cost given as a JSON string ("1") is refused
// with 400 invalid_cost, however it is written, before the engine is asked.
func TestCostMustBeANumber(t *testing.T) {
	t.Parallel()
	url, eng := start(t)
	for _, c := range []struct{ path, body string }{
		{"/v1/check", `{"limit":"login","key":"k","cost":"1"}`},
		{"/v1/check", `{"hits":[{"limit":"login","key":"k","cost":"1"}]}`},
		{"/v1/peek", `{"limit":"login","cost":"2"}`},
		{"/v1/check", `{"limit":"login","cost":true}`},
		{"/v1/check", `{"limit":"login","cost":[1]}`},
		{"/v1/reserve", `{"limit":"login","key":"k","cost":"1"}`},
		{"/v1/reserve", `{"hits":[{"limit":"login","cost":"1"}]}`},
	} {
		resp, m := post(t, url+c.path, c.body)
		msg, _ := m["error"].(string)
		if resp.StatusCode != http.StatusBadRequest || m["code"] != CodeInvalidCost || !strings.Contains(msg, "not a JSON number") {
			t.Errorf("%s %s: %d %v, want 400 invalid_cost saying it is not a number", c.path, c.body, resp.StatusCode, m)
		}
	}
	if resp, m := post(t, url+"/v1/reserve", `{"limit":"login","ttl":"60"}`); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("ttl as a string: %d %v", resp.StatusCode, m)
	}
	if n := eng.checks.Load() + eng.peeks.Load(); n != 0 {
		t.Fatalf("refused costs reached the engine %d times", n)
	}
	// A number, and null (not given), are costs.
	if resp, m := post(t, url+"/v1/check", `{"limit":"login","key":"k","cost":2}`); m["remaining"] != float64(1) {
		t.Errorf("cost 2: %d %v", resp.StatusCode, m)
	}
	if resp, m := post(t, url+"/v1/check", `{"limit":"login","key":"k","cost":null}`); m["remaining"] != float64(0) {
		t.Errorf("cost null: %d %v", resp.StatusCode, m)
	}
}

// TestForgedTokenKeyRefused: a reservation token whose key is not valid
// UTF-8 is refused as not a token, before anything is settled.
func TestForgedTokenKeyRefused(t *testing.T) {
	t.Parallel()
	url, _ := start(t)
	_, m := post(t, url+"/v1/reserve", `{"limit":"login","key":"k"}`)
	raw, err := base64.RawURLEncoding.DecodeString(m["reservation"].(string))
	if err != nil {
		t.Fatal(err)
	}
	var rsv map[string]any
	if err := json.Unmarshal(raw, &rsv); err != nil {
		t.Fatal(err)
	}
	forged := strings.Replace(string(raw), `"k":"k"`, "\"k\":\"k\xff\"", 1)
	if forged == string(raw) || utf8.ValidString(forged) {
		t.Fatalf("token %s has no key to forge", raw)
	}
	tok := base64.RawURLEncoding.EncodeToString([]byte(forged))
	if resp, m := post(t, url+"/v1/settle", `{"reservation":"`+tok+`","actual":0}`); resp.StatusCode != http.StatusBadRequest || m["code"] != CodeBadRequest {
		t.Errorf("forged key: %d %v", resp.StatusCode, m)
	}
	if resp, m := post(t, url+"/v1/settle", `{"reservation":"`+m["reservation"].(string)+`","actual":{"login\xff":1}}`); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("actual with a bad name: %d %v", resp.StatusCode, m)
	}
	if resp, m := post(t, url+"/v1/settle", `{"reservation":"`+m["reservation"].(string)+`","actual":0}`); resp.StatusCode != http.StatusOK {
		t.Errorf("the real token after the forged ones: %d %v", resp.StatusCode, m)
	}
}

// FuzzUnquote: unquote accepts exactly the JSON strings encoding/json
// decodes without replacing anything, and decodes them the same way.
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`"a"`, `"\u00e9"`, `"\ud83d\ude00"`, `"\ud800"`, "\"\xff\"", `"\\\""`, `"\u0000"`, `"x\/y"`, `""`, `"\uDBFF\uDFFF"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := unquote([]byte(s))
		var want string
		if json.Unmarshal([]byte(s), &want) != nil {
			return // unquote reads only what the decoder took for a string
		}
		if err != nil {
			if utf8.ValidString(s) && !strings.Contains(want, "\ufffd") {
				t.Fatalf("unquote(%q) refused %q: %v", s, want, err)
			}
			return
		}
		if got != want {
			t.Fatalf("unquote(%q) = %q, encoding/json %q", s, got, want)
		}
		if !utf8.ValidString(got) {
			t.Fatalf("unquote(%q) = %q, not UTF-8", s, got)
		}
	})
}

// TestLongKeysNeverShareWithTheirHash: a key longer than the engine keeps
// is counted under its hash; a short key spelled as that hash, or as the
// API's own escape of one, is another counter, and so is every key
// beside it.
func TestLongKeysNeverShareWithTheirHash(t *testing.T) {
	t.Parallel()
	url, _ := start(t)
	long := strings.Repeat("k", 300) // above the engine's 256 bytes
	sum := sha256.Sum256([]byte(long))
	hash := "sha256:" + hex.EncodeToString(sum[:16])
	for i := range 3 {
		if resp, m := post(t, url+"/v1/check", `{"limit":"login","key":"`+long+`"}`); resp.StatusCode != http.StatusOK || m["remaining"] != float64(2-i) {
			t.Fatalf("long key, check %d: %d %v", i, resp.StatusCode, m)
		}
	}
	for _, k := range []string{hash, "%" + hash, "%%" + hash, "%", "%%", "sha256:"} {
		resp, m := post(t, url+"/v1/check", `{"limit":"login","key":"`+k+`"}`)
		if resp.StatusCode != http.StatusOK || m["remaining"] != float64(2) {
			t.Errorf("key %q beside a long key whose 3 are spent: %d %v, want a counter of its own", k, resp.StatusCode, m)
		}
	}
	// Each is its own counter, and keeps it across a reservation.
	_, m := post(t, url+"/v1/reserve", `{"limit":"login","key":"%`+hash+`","cost":2}`)
	tok, _ := m["reservation"].(string)
	if tok == "" {
		t.Fatalf("reserve: %v", m)
	}
	if resp, m := post(t, url+"/v1/settle", `{"reservation":"`+tok+`","actual":0}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("settle: %d %v", resp.StatusCode, m)
	}
	if _, m := post(t, url+"/v1/peek", `{"limit":"login","key":"%`+hash+`"}`); m["remaining"] != float64(1) {
		t.Errorf("after a settle of 0: %v, want the 2 given back (1 left after the peek)", m)
	}
}

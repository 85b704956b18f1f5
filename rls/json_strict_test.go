package rls

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestJSONStrictFields: /json refuses a field given twice in one object
// (also once by its proto name and once by its JSON name, or once
// escaped) and a field name in another case, with 400 and nothing
// charged, so that what a proxy or a log reads of a request is what is
// charged. protojson does this itself (google.golang.org/protobuf's
// decoder refuses duplicate and unknown fields, and matches names
// exactly); this test holds it to that.
func TestJSONStrictFields(t *testing.T) {
	ts := jsonServer(t)
	post := func(body string) (int, string) { return postJSON(t, ts.URL, body) }
	entry := func(key, value string) string { return `{"entries":[{"key":"` + key + `","value":"` + value + `"}]}` }
	for _, c := range []struct{ name, body, why string }{
		{"duplicate domain", `{"domain":"x","domain":"d","descriptors":[` + entry("user", "a") + `]}`, `duplicate field "domain"`},
		{"duplicate in an entry", `{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"a","value":"b"}]}]}`, `duplicate field "value"`},
		{"proto and JSON names", `{"domain":"d","descriptors":[` + entry("user", "a") + `],"hitsAddend":1,"hits_addend":5}`, `duplicate field "hits_addend"`},
		{"escaped duplicate", `{"domain":"d","d\u006fmain":"x","descriptors":[` + entry("user", "a") + `]}`, `duplicate field "d\u006fmain"`},
		{"case of a field", `{"Domain":"d","descriptors":[` + entry("user", "a") + `]}`, `unknown field "Domain"`},
		{"case in an entry", `{"domain":"d","descriptors":[{"entries":[{"KEY":"user","value":"a"}]}]}`, `unknown field "KEY"`},
		{"Kelvin sign", `{"domain":"d","descriptors":[{"entries":[{"\u212aey":"user","value":"a"}]}]}`, `unknown field`},
	} {
		if code, body := post(c.body); code != http.StatusBadRequest || !strings.Contains(body, c.why) {
			t.Errorf("%s: %d %q, want 400 with %s", c.name, code, body, c.why)
		}
	}
	// Taken: one field name in two objects, and a lone escaped name; each
	// charges user=a once.
	for i, body := range []string{
		`{"domain":"d","descriptors":[` + entry("user", "a") + `,` + entry("api", "a") + `]}`,
		`{"d\u006fmain":"d","descriptors":[` + entry("user", "a") + `]}`,
	} {
		code, out := post(body)
		var resp struct {
			Statuses []struct {
				LimitRemaining int `json:"limitRemaining"`
			} `json:"statuses"`
		}
		if err := json.Unmarshal([]byte(out), &resp); err != nil || code != http.StatusOK || len(resp.Statuses) == 0 {
			t.Fatalf("%s: %d %q (%v)", body, code, out, err)
		}
		if got, want := resp.Statuses[0].LimitRemaining, 9-i; got != want {
			t.Errorf("%s: user=a has %d left, want %d (the refused requests charged nothing)", body, got, want)
		}
	}
}

// jsonServer serves /json of a service of the basic config on a memory
// store, closed at the test's end.
func jsonServer(t *testing.T) *httptest.Server {
	t.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ts := httptest.NewServer(JSONHandler(New(limiter.New(st, limiter.Options{}), mustParse(t, basic), Options{})))
	t.Cleanup(ts.Close)
	return ts
}

// postJSON posts body to url's /json and returns the status and body of
// the answer.
func postJSON(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

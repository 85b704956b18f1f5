package rls

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestJSONRefusesBrowsers: /json takes no token, so what a page can make
// a browser send to it is refused with 403 and charges nothing: a page of
// another site posting without a CORS preflight (a form, or a no-cors
// fetch of JSON as text/plain, urlencoded or multipart), marked by
// Sec-Fetch-Site or only by an Origin, and a page whose name was rebound
// to the service's address, which the browser takes for the service's
// own origin, with any method. A service (neither field) is then charged
// as if no browser had come: its limit of 10 is whole.
func TestJSONRefusesBrowsers(t *testing.T) {
	ts := jsonServer(t)
	send := func(method, ct string, hdr map[string]string, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, ts.URL+"/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ct)
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The victim's whole limit (10 a minute) in one request.
	body := `{"domain":"d","hitsAddend":10,"descriptors":[{"entries":[{"key":"user","value":"victim"}]}]}`
	// What Chromium sends with a form of another site, with a fetch of a
	// page on another port of the same host (same-site), with a fetch of
	// a page whose name now resolves to the service's address, and what a
	// browser without Sec-Fetch-Site sends.
	browsers := []map[string]string{
		{"Origin": "https://attacker.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"},
		{"Origin": "http://localhost:1", "Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors"},
		{"Origin": "http://rebound.example:8080", "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors",
			"Host": "rebound.example:8080"},
		{"Origin": "null", "Sec-Fetch-Site": "cross-site"},
		{"Origin": "https://attacker.example"},
		{"Sec-Fetch-Site": "none"},
	}
	for _, method := range []string{"POST", "PUT"} {
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/json"} {
			for _, hdr := range browsers {
				code, answer := send(method, ct, hdr, body)
				if code != http.StatusForbidden || !strings.Contains(answer, "answers no browser") {
					t.Errorf("%s /json as %s with %v: %d %q, want 403 answers no browser", method, ct, hdr, code, answer)
				}
			}
		}
	}
	code, answer := send("POST", "application/json", nil, strings.Replace(body, `"hitsAddend":10`, `"hitsAddend":1`, 1))
	var resp struct {
		OverallCode string `json:"overallCode"`
		Statuses    []struct {
			LimitRemaining int `json:"limitRemaining"`
		} `json:"statuses"`
	}
	if err := json.Unmarshal([]byte(answer), &resp); err != nil || len(resp.Statuses) != 1 {
		t.Fatalf("a service's request: %d %q (%v)", code, answer, err)
	}
	if code != http.StatusOK || resp.OverallCode != "OK" || resp.Statuses[0].LimitRemaining != 9 {
		t.Errorf("a service's request after the browsers': %d %s with %d left, want 200 OK with 9 left",
			code, resp.OverallCode, resp.Statuses[0].LimitRemaining)
	}
}

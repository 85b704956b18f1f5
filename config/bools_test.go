package config

import (
	"strings"
	"testing"
)

// TestBooleansAreYAMLBooleans: a boolean field of the policy file takes
// true or false (True, TRUE, False, FALSE too: YAML 1.2's core schema) and
// nothing else: 1, t, yes, a quoted "true" are refused at their field with
// its file, line and column, where they used to be read as booleans (1, t)
// or would be by a YAML 1.1 reader (yes).
func TestBooleansAreYAMLBooleans(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"true", "True", "TRUE", "!!bool true"} {
		f, err := Parse("p.yaml", []byte("limits:\n  - {name: l, rate: 5, shadow: "+v+"}\nroutes:\n  - {name: r, upstream: none, api_key_required: "+v+"}\n"))
		if err != nil {
			t.Errorf("%s: %v", v, err)
			continue
		}
		if !f.Limits[0].Shadow || !f.Routes[0].APIKeyRequired {
			t.Errorf("%s: not read as true", v)
		}
	}
	for _, v := range []string{"false", "False", "FALSE"} {
		f, err := Parse("p.yaml", []byte("server:\n  headers: {ratelimit: "+v+"}\n"))
		if err != nil || f.Server.Headers.RateLimit {
			t.Errorf("%s: %v, ratelimit header %v", v, err, err == nil && f.Server.Headers.RateLimit)
		}
	}
	for v, why := range map[string]string{
		"1":      `want true or false, got "1"`,
		"0":      `want true or false, got "0"`,
		"t":      `want true or false, got "t"`,
		"T":      `want true or false, got "T"`,
		"tRuE":   `want true or false, got "tRuE"`,
		"yes":    `want true or false, got "yes"`,
		"on":     `want true or false, got "on"`,
		`"true"`: `want true or false, got the quoted string "true": a boolean is written without quotes`,
		`'True'`: `want true or false, got the quoted string "True": a boolean is written without quotes`,
	} {
		for at, src := range map[string]string{
			"p.yaml:2:32: limits[0].shadow":         "limits:\n  - {name: l, rate: 5, shadow: " + v + "}\n",
			"p.yaml:3:16: server.headers.ratelimit": "server:\n  headers:\n    ratelimit: " + v + "\n",
		} {
			_, err := Parse("p.yaml", []byte(src))
			if want := at + ": " + why; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want %q", v, err, want)
			}
		}
	}
}

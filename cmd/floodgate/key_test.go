package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/policy"
)

var (
	keyLine  = regexp.MustCompile(`(?m)^    (fg_[A-Za-z0-9_-]+)$`)
	yamlLine = regexp.MustCompile(`(?m)^  - \{name: ([^,]+), plan: ([^,]+), sha256: ([0-9a-f]{64})\}$`)
)

func TestKeyNew(t *testing.T) {
	t.Parallel()
	example := filepath.Join("..", "..", "examples", "school.yaml")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"key", "new", "--plan", "trial", "--name", "school-9", "--config", example}, &out, &errOut); err != nil {
		t.Fatalf("key new: %v\n%s", err, errOut.String())
	}
	k := keyLine.FindStringSubmatch(out.String())
	y := yamlLine.FindStringSubmatch(out.String())
	if k == nil || y == nil {
		t.Fatalf("output:\n%s", out.String())
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(k[1], keyPrefix))
	if err != nil || len(raw) != keyBytes {
		t.Errorf("key %q does not hold %d random bytes", k[1], keyBytes)
	}
	if y[1] != "school-9" || y[2] != "trial" || y[3] != config.HashKey(k[1]) {
		t.Errorf("line %q", y[0])
	}
	// The printed line works in a policy file.
	f, err := config.Parse("k.yaml", []byte("plans:\n  - {name: trial, rate: 1}\nkeys:\n"+y[0]+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Compile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	if name, plan, ok := p.KeyName(k[1]); !ok || name != "school-9" || plan != "trial" {
		t.Errorf("KeyName = %q %q %v", name, plan, ok)
	}

	// Two keys differ; the default name comes from the hash.
	out.Reset()
	if err := run(context.Background(), []string{"key", "new", "--plan", "trial"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	k2 := keyLine.FindStringSubmatch(out.String())
	y2 := yamlLine.FindStringSubmatch(out.String())
	if k2 == nil || k2[1] == k[1] || y2 == nil || y2[1] != "trial-"+y2[3][:8] {
		t.Errorf("second key output:\n%s", out.String())
	}
}

func TestKeyNewDeterministic(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	random := bytes.NewReader(bytes.Repeat([]byte{0xfb}, keyBytes))
	if err := runKeyNew([]string{"--plan", "p"}, &out, &bytes.Buffer{}, random); err != nil {
		t.Fatal(err)
	}
	key := keyPrefix + strings.Repeat("-_v7", 10) + "-_s" // 0xfbfbfb is -_v7 in base64url
	if k := keyLine.FindStringSubmatch(out.String()); k == nil || k[1] != key {
		t.Errorf("key from 0xfb bytes:\n%s\nwant %s", out.String(), key)
	}
	if err := runKeyNew([]string{"--plan", "p"}, &out, &bytes.Buffer{}, bytes.NewReader(nil)); err == nil {
		t.Error("no randomness accepted")
	}
}

func TestKeyErrors(t *testing.T) {
	t.Parallel()
	example := filepath.Join("..", "..", "examples", "school.yaml")
	var out, errOut bytes.Buffer
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"key"}, 2},
		{[]string{"key", "rotate"}, 2},
		{[]string{"key", "new"}, 2},
		{[]string{"key", "new", "--plan", "gold", "--config", example}, 1},
		{[]string{"key", "new", "--plan", "trial", "--name", "partner-1", "--config", example}, 1},
	} {
		if code := exitCode(run(context.Background(), tc.args, &out, &errOut)); code != tc.code {
			t.Errorf("%q: exit %d, want %d", tc.args, code, tc.code)
		}
	}
}

func TestKeyHash(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := runKeyHash(nil, strings.NewReader("key-trial\n"), &out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "sha256: efa928a8b832a86862991bd6259ec33c372293d7091105e1b00b235287e8f04a\n" {
		t.Errorf("got %q", got)
	}
	if err := runKeyHash(nil, strings.NewReader(""), &out); exitCode(err) != 2 {
		t.Errorf("empty input: %v", err)
	}
	// Keys no client can send, as the gateway reads header values (their
	// ends trimmed, no control characters): refused, not hashed.
	for _, in := range []string{"key-trial \n", "\tkey-trial\n", "key-trial\t", "key\x00trial\n", "key\x1btrial\n", "key\x7ftrial"} {
		out.Reset()
		if err := runKeyHash(nil, strings.NewReader(in), &out); exitCode(err) != 2 || out.Len() != 0 {
			t.Errorf("key %q: %v, printed %q; want it refused with status 2", in, err, out.String())
		}
	}
}

// TestKeyNewLineIsYAML: the printed keys: line parses, with config, to the
// same name, plan and hash for names YAML would read as something else;
// a name the policy file cannot hold ("ops: team") is refused at once.
func TestKeyNewLineIsYAML(t *testing.T) {
	line := regexp.MustCompile(`(?m)^  - \{.*\}$`)
	for _, name := range []string{"school-9", "null", "true", "123", "1e3", "0x1f", "yes", "-1"} {
		var out bytes.Buffer
		if err := run(context.Background(), []string{"key", "new", "--plan", "trial", "--name", name}, &out, &bytes.Buffer{}); err != nil {
			t.Fatalf("--name %q: %v", name, err)
		}
		k := keyLine.FindStringSubmatch(out.String())
		l := line.FindString(out.String())
		if k == nil || l == "" {
			t.Fatalf("--name %q: output\n%s", name, out.String())
		}
		f, err := config.Parse("k.yaml", []byte("plans:\n  - {name: trial, rate: 1}\nkeys:\n"+l+"\n"))
		if err != nil {
			t.Fatalf("--name %q: the printed line %s does not load: %v", name, l, err)
		}
		if got := f.Keys[0]; got.Name != name || got.Plan != "trial" || got.SHA256 != config.HashKey(k[1]) {
			t.Errorf("--name %q: the line %s loads as %+v", name, l, got)
		}
	}
	for _, args := range [][]string{
		{"key", "new", "--plan", "trial", "--name", "ops: team"},
		{"key", "new", "--plan", "gold plan"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, &out, &errOut)
		if exitCode(err) != 2 || !strings.Contains(err.Error(), "letters, digits, '-' and '_'") || out.Len() != 0 {
			t.Errorf("%q: exit %d, %v, printed %q", args, exitCode(err), err, out.String())
		}
	}
}

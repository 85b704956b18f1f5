package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate/floodgate/config"
)

// keyBytes is the randomness of a generated key: 256 bits.
const keyBytes = 32

// keyPrefix marks Floodgate keys, so secret scanners can recognise them.
const keyPrefix = "fg_"

func runKey(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: floodgate key new --plan NAME [--name NAME] [--config FILE]")
		fmt.Fprintln(stderr, "       floodgate key hash < key.txt")
		return usagef("key: want a subcommand: new or hash")
	}
	switch args[0] {
	case "new":
		return runKeyNew(args[1:], stdout, stderr, rand.Reader)
	case "hash":
		return runKeyHash(args[1:], os.Stdin, stdout)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, "usage: floodgate key new --plan NAME [--name NAME] [--config FILE]")
		fmt.Fprintln(stdout, "       floodgate key hash < key.txt")
		return nil
	}
	return usagef("key: unknown subcommand %q (want new or hash)", args[0])
}

const keyNewUsage = `usage: floodgate key new --plan NAME [--name NAME] [--config FILE]

Makes a strong API key, prints it once, and the line (with its SHA-256)
to add to the policy file's keys.

flags:
`

func runKeyNew(args []string, stdout, stderr io.Writer, random io.Reader) error {
	fs := flag.NewFlagSet("key new", flag.ContinueOnError)
	plan := fs.String("plan", "", "the usage plan the key belongs to (required)")
	name := fs.String("name", "", "the key's name in logs and counters (default: derived from the key's hash)")
	cfg := fs.String("config", "", "a policy file to check the plan and the name against")
	if help, err := parseFlags(fs, args, stdout, keyNewUsage); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("key new: unexpected arguments %q", fs.Args())
	}
	if *plan == "" {
		return usagef("key new: --plan is required")
	}
	for _, n := range []struct{ flag, value string }{{"--plan", *plan}, {"--name", *name}} {
		if n.value != "" && !config.ValidName(n.value) {
			return usagef("key new: %s %q: a name may only have letters, digits, '-' and '_' (at most 64)", n.flag, n.value)
		}
	}
	if *cfg != "" {
		f, err := config.Load(*cfg)
		if err != nil {
			return &exitError{Code: 1, Err: err}
		}
		found := false
		for _, p := range f.Plans {
			found = found || p.Name == *plan
		}
		if !found {
			return &exitError{Code: 1, Err: fmt.Errorf("key new: %s has no plan %q", *cfg, *plan)}
		}
		for _, k := range f.Keys {
			if *name != "" && k.Name == *name {
				return &exitError{Code: 1, Err: fmt.Errorf("key new: %s already has a key named %q", *cfg, *name)}
			}
		}
	}
	buf := make([]byte, keyBytes)
	if _, err := io.ReadFull(random, buf); err != nil {
		return fmt.Errorf("key new: random: %w", err)
	}
	key := keyPrefix + base64.RawURLEncoding.EncodeToString(buf)
	sum := config.HashKey(key)
	if *name == "" {
		*name = *plan + "-" + sum[:8]
	}
	fmt.Fprintf(stdout, "API key (shown only now; give it to the client and keep no copy):\n\n    %s\n\n", key)
	line, err := keyEntry(*name, *plan, sum)
	if err != nil {
		return fmt.Errorf("key new: %w", err)
	}
	fmt.Fprintf(stdout, "Add this line under keys: in the policy file:\n\n")
	fmt.Fprintf(stdout, "  - %s\n", line)
	return nil
}

// keyEntry renders a keys: item as one line of YAML, quoting what YAML
// would otherwise read as something else (a name "null", "true" or "1e3").
func keyEntry(name, plan, sum string) (string, error) {
	m := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
	for _, kv := range [][2]string{{"name", name}, {"plan", plan}, {"sha256", sum}} {
		m.Content = append(m.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: kv[0]},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: kv[1]})
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// runKeyHash prints the sha256 line of a key read from stdin, for keys made
// elsewhere.
func runKeyHash(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) > 0 {
		return usagef("key hash: reads the key from standard input; no arguments")
	}
	line, err := bufio.NewReader(io.LimitReader(stdin, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("key hash: %w", err)
	}
	key := strings.TrimRight(line, "\r\n")
	if key == "" {
		return usagef("key hash: no key on standard input")
	}
	// A field's value reaches the gateway without the spaces and tabs at
	// its ends, and cannot hold a control character: the hash of such a
	// key would never match the key a client sends.
	if strings.Trim(key, " \t") != key {
		return usagef("key hash: the key starts or ends with a space or a tab, which no header value keeps: its hash would never match")
	}
	if strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
		return usagef("key hash: the key holds a control character, which no header value can carry")
	}
	fmt.Fprintf(stdout, "sha256: %s\n", config.HashKey(key))
	return nil
}

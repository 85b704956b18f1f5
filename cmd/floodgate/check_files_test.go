//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testcerts"
)

// fileCase is a policy naming one file that floodgate serve cannot use,
// and the problem check reports for it.
type fileCase struct {
	name  string
	field string // the field the problem is placed at
	value string // the field's value in the policy, found once in it
	text  string // the policy
	// want is the message, after "file:line:col: field: "; or, for a
	// message another package makes, parts of it.
	want  string
	parts []string
}

// fileCases lays out dir for the cases and returns them. Their relative
// paths are relative to the policy file (in dir), never to the working
// directory. As root, where permission bits stop no write, the case of a
// directory without write permission is one of a file where a directory
// is wanted.
func fileCases(t *testing.T, dir string) []fileCase {
	t.Helper()
	write := func(name, text string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, d := range []string{"logs", "ro"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(dir, "ro"), 0o755) })
	write("plain", "not a directory, not a certificate\n", 0o644)
	write("bad.keys.json", "not JSON\n", 0o600)
	write("blank.secret", " \n", 0o600)
	write("rls/shop.yaml", "domain: shop\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n", 0o644)
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca, err := testcerts.NewCA(dir, "files")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Server("api")
	if err != nil {
		t.Fatal(err)
	}
	unwritable, notTaking := "ro", "the directory "+filepath.Join(dir, "ro")+" does not take new files: permission denied"
	if os.Geteuid() == 0 {
		unwritable, notTaking = "plain", filepath.Join(dir, "plain")+" is not a directory"
	}
	abs := func(p string) string { return filepath.Join(dir, p) }
	server := func(lines string) string {
		return "version: 1\nserver:\n" + lines + "routes: [{name: r, match: {paths: [\"/**\"]}, upstream: none}]\n"
	}
	plan := func(secret string) string {
		return "version: 1\nplans:\n  - name: basic\n    quota: {limit: 10, period: DAY}\n" +
			"    alarms: {webhook: \"https://hooks.example.com/fg\", secret_file: " + secret + "}\n"
	}
	return []fileCase{
		fc("access log in a missing directory", "server.access_log.path", "missing/access.log",
			server("  access_log: {path: missing/access.log}\n"),
			"cannot create "+abs("missing/access.log")+": the directory "+abs("missing")+" does not exist"),
		fc("access log at a directory", "server.access_log.path", "logs",
			server("  access_log: {path: logs}\n"),
			abs("logs")+" is a directory; want the log file's path"),
		fc("access log in an unwritable directory", "server.access_log.path", unwritable+"/access.log",
			server("  access_log:\n    path: "+unwritable+"/access.log\n"),
			"cannot create "+abs(unwritable+"/access.log")+": "+notTaking),
		fc("state file in a missing directory", "server.state_file", "missing/state.bin",
			server("  state_file: missing/state.bin\n"),
			"cannot write snapshots to "+abs("missing/state.bin")+": the directory "+abs("missing")+" does not exist"),
		fc("state file at a directory", "server.state_file", "logs",
			server("  state_file: logs\n"),
			abs("logs")+" is a directory; want the state file's path"),
		fc("state file in an unwritable directory", "server.state_file", unwritable+"/state.bin",
			server("  state_file: "+unwritable+"/state.bin\n"),
			"cannot write snapshots to "+abs(unwritable+"/state.bin")+": "+notTaking),
		fc("keys file at a directory", "server.admin.keys_file", "logs",
			server("  admin: {keys_file: logs}\n"),
			"", "cannot load the keys made through the admin API: ", abs("logs")),
		fc("keys file not JSON", "server.admin.keys_file", "bad.keys.json",
			server("  admin: {keys_file: bad.keys.json}\n"),
			"cannot load the keys made through the admin API: "+abs("bad.keys.json")+":1:2: invalid character 'o' in literal null (expecting 'u')"),
		fc("webhook secret missing", "plans[0].alarms.secret_file", "missing.secret", plan("missing.secret"),
			"cannot read the secret: open "+abs("missing.secret")+": no such file or directory"),
		fc("webhook secret blank", "plans[0].alarms.secret_file", "blank.secret", plan("blank.secret"),
			abs("blank.secret")+" is empty; want the secret"),
		fc("webhook secret at a directory", "plans[0].alarms.secret_file", "logs", plan("logs"),
			"cannot read the secret: "+abs("logs")+": not a regular file (a directory); want a file, or a symbolic link to one"),
		fc("webhook secret at a named pipe", "plans[0].alarms.secret_file", "pipe.secret", plan("pipe.secret"),
			"cannot read the secret: "+abs("pipe.secret")+": not a regular file (a named pipe); want a file, or a symbolic link to one"),
		fc("admin certificate missing", "server.admin.tls_cert", "missing.pem",
			server("  admin: {tls_cert: missing.pem, tls_key: missing-key.pem}\n"),
			"", abs("missing.pem"), "no such file or directory"),
		fc("check API client CA without a certificate", "server.api_tls_client_ca", "plain",
			server("  api_listen: 127.0.0.1:0\n  api_auth: none\n  api_tls_cert: "+pair.Cert+"\n  api_tls_key: "+pair.Key+
				"\n  api_tls_client_ca: plain\n"),
			"", "no PEM certificate in "+abs("plain")),
		fc("rate-limit service certificate missing", "server.grpc_tls_cert", "missing.pem",
			server("  grpc_listen: 127.0.0.1:0\n  rls_config: [rls]\n  grpc_tls_cert: missing.pem\n  grpc_tls_key: "+pair.Key+"\n"),
			"", abs("missing.pem"), "no such file or directory"),
	}
}

// matches reports whether err is the one problem of c in the policy at
// path, at its line, column and field.
func (c *fileCase) matches(t *testing.T, path string, err error) bool {
	t.Helper()
	if err == nil {
		return false
	}
	prefix := path + ":" + at(t, c.text, c.value) + ": " + c.field + ": "
	got := err.Error()
	if c.want != "" {
		if got != prefix+c.want {
			t.Logf("%s:\n got %s\nwant %s", c.name, got, prefix+c.want)
			return false
		}
		return true
	}
	ok := strings.HasPrefix(got, prefix) && !strings.Contains(got, "\n")
	for _, p := range c.parts {
		ok = ok && strings.Contains(got, p)
	}
	if !ok {
		t.Logf("%s:\n got %s\nwant %s followed by %q", c.name, got, prefix, c.parts)
	}
	return ok
}

// fc makes a fileCase.
func fc(name, field, value, text, want string, parts ...string) fileCase {
	return fileCase{name: name, field: field, value: value, text: text, want: want, parts: parts}
}

// at is where value is in text: "line:col".
func at(t *testing.T, text, value string) string {
	t.Helper()
	if strings.Count(text, value) != 1 {
		t.Fatalf("%q is not once in the policy:\n%s", value, text)
	}
	before := text[:strings.Index(text, value)]
	line := strings.Count(before, "\n") + 1
	col := len(before) - strings.LastIndex(before, "\n")
	return fmt.Sprintf("%d:%d", line, col)
}

// TestCheckRefusesFilesServeCannotUse: floodgate check fails on every
// file that floodgate serve would refuse to start with, or would start
// without (an access log or a state file in a directory that is missing,
// or that takes no new files, or at a directory; a keys file that does
// not load; a webhook secret missing, blank, at a directory or at a named
// pipe, read without waiting; a certificate or client CA of the admin
// listener, the check API or the rate-limit service that does not load),
// each problem at its file, line, column and field. The places serve keeps
// files in (the access log, the state file, the keys file) are looked at
// with --files only: without it, a policy checked where serve does not run
// passes whatever directories it names. It creates nothing.
func TestCheckRefusesFilesServeCannotUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for i, c := range fileCases(t, dir) {
		path := filepath.Join(dir, fmt.Sprintf("policy%d.yaml", i))
		if err := os.WriteFile(path, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		err := run(context.Background(), []string{"check", "--config", path, "--files"}, &out, &errOut)
		if code := exitCode(err); code != 1 || !c.matches(t, path, err) {
			t.Errorf("%s: exit %d: %v", c.name, code, err)
		}
		err = run(context.Background(), []string{"check", "--config", path}, &out, &errOut)
		switch c.field {
		case "server.access_log.path", "server.state_file", "server.admin.keys_file":
			if err != nil {
				t.Errorf("%s, without --files: %v, want the place left to serve's start", c.name, err)
			}
		default:
			if code := exitCode(err); code != 1 || !c.matches(t, path, err) {
				t.Errorf("%s, without --files: exit %d: %v", c.name, code, err)
			}
		}
	}
	for _, p := range []string{"missing", "logs/access.log", "ro/access.log", "ro/state.bin"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); !os.IsNotExist(err) {
			t.Errorf("the check made %s (%v)", p, err)
		}
	}
}

// TestServeRefusesWhatCheckRefuses: floodgate serve refuses to start with
// each file floodgate check --files refuses, with the check's own message (the
// file, line, column and field of the problem), before it opens a
// listener or a store.
func TestServeRefusesWhatCheckRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for i, c := range fileCases(t, dir) {
		path := filepath.Join(dir, fmt.Sprintf("policy%d.yaml", i))
		if err := os.WriteFile(path, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := run(ctx, []string{"serve", "--config", path, "--listen", "127.0.0.1:0", "--ops-listen", "off", "--log-level", "error"}, &out, &errOut)
		cancel()
		if err == nil || !strings.HasPrefix(err.Error(), "serve: ") || !c.matches(t, path, errors.New(strings.TrimPrefix(err.Error(), "serve: "))) {
			t.Errorf("%s: serve returned %v", c.name, err)
			continue
		}
		checkErr := run(context.Background(), []string{"check", "--config", path, "--files"}, &out, &errOut)
		if want := "serve: " + fmt.Sprint(checkErr); err.Error() != want {
			t.Errorf("%s: serve returned\n%v\nwant check's message\n%s", c.name, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("serve made the missing directory (%v)", err)
	}
}

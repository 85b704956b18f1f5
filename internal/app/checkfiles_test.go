package app

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/config"
)

// TestCheckFilesFollowsServeSettings: the files are looked at as serve
// would use them: relative to the policy file, not to the working
// directory; the default keys file beside a state file whose directory is
// missing is not reported a second time; --access-log replaces the
// file's path (a problem of its path is named after the flag); with a
// Redis store (--store-file) there is no state or keys file, and with the
// admin listener off no admin certificate to load; without places (a
// policy checked where serve does not run) only the files serve reads are
// looked at. Usable files pass. Nothing is created.
func TestCheckFilesFollowsServeSettings(t *testing.T) {
	t.Parallel()
	checkUsableFiles(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	text := "version: 1\nserver:\n  access_log: {path: missing/access.log}\n  state_file: missing/state.bin\n" +
		"  admin: {tls_cert: admin.pem, tls_key: admin-key.pem}\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	abs := func(p string) string { return filepath.Join(dir, p) }
	// Without places, only what serve reads: the admin certificate.
	if got := errText(CheckFiles(path, f, false)); !strings.HasPrefix(got, path+":5:21: server.admin.tls_cert: ") || strings.Contains(got, "\n") {
		t.Errorf("CheckFiles without places: %s", got)
	}
	err = CheckFiles(path, f, true)
	want := []string{
		path + ":3:22: server.access_log.path: cannot create " + abs("missing/access.log") + ": the directory " + abs("missing") + " does not exist",
		path + ":4:15: server.state_file: cannot write snapshots to " + abs("missing/state.bin") + ": the directory " + abs("missing") + " does not exist",
		path + ":5:21: server.admin.tls_cert: ",
	}
	lines := strings.Split(strings.TrimSpace(errText(err)), "\n")
	if len(lines) != len(want) {
		t.Fatalf("CheckFiles: %d problems, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("problem %d:\n got %s\nwant %s", i, lines[i], w)
		}
	}
	var errs config.Errors
	if !errors.As(err, &errs) || errs[0].File != path || errs[0].Field != "server.access_log.path" || errs[0].Line != 3 {
		t.Errorf("CheckFiles returned %#v, want config.Errors, the first at server.access_log.path", err)
	}

	redis := f.Server
	redis.Store = "redis://127.0.0.1:1/0"
	if err := checkFiles(f, &redis, &ServeOptions{Config: path, AccessLog: "-", AdminListen: "off"}, true); err != nil {
		t.Errorf("with --access-log -, --admin-listen off and a Redis store: %v", err)
	}
	flag := abs("elsewhere/access.log")
	err = checkFiles(f, &redis, &ServeOptions{Config: path, AccessLog: flag, AdminListen: "off"}, true)
	if got, want := errText(err), "--access-log: cannot create "+flag+": the directory "+abs("elsewhere")+" does not exist"; got != want {
		t.Errorf("with --access-log %s:\n got %s\nwant %s", flag, got, want)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 1 {
		t.Errorf("the directory holds %v (%v), want the policy only", entries, err)
	}
}

// checkUsableFiles checks that an access log and a state file to be made
// in writable directories, an existing keys file and a webhook secret
// pass, and that the check makes none of the files.
func checkUsableFiles(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"logs", "state"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range map[string]string{"keys.json": `{"keys": []}`, "hook.secret": "s3cret\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "policy.yaml")
	text := "version: 1\nserver:\n  access_log: {path: logs/access.log}\n  state_file: state/state.bin\n  admin: {keys_file: keys.json}\n" +
		"plans:\n  - name: basic\n    quota: {limit: 10, period: DAY}\n" +
		"    alarms: {webhook: \"https://hooks.example.com/fg\", secret_file: hook.secret}\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckFiles(path, f, true); err != nil {
		t.Errorf("CheckFiles: %v", err)
	}
	for _, p := range []string{"logs/access.log", "state/state.bin"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); !os.IsNotExist(err) {
			t.Errorf("the check made %s (%v)", p, err)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

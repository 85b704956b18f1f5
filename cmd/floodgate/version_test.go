package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// buildFromClone clones this repository at its HEAD into a new directory,
// applies change to the clone (nil: none) and builds floodgate there as a
// release would (-trimpath, the go command's VCS stamps on), with env added
// to the go command's environment. It returns the binary and the commit.
func buildFromClone(t *testing.T, change func(dir string), env ...string) (bin, rev string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("git", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	rev = git("-C", root, "rev-parse", "HEAD")
	dir := filepath.Join(t.TempDir(), "src")
	git("clone", "--quiet", "--shared", "--no-checkout", root, dir)
	git("-C", dir, "checkout", "--quiet", "--detach", rev)
	if change != nil {
		change(dir)
	}
	bin = filepath.Join(t.TempDir(), "floodgate")
	build := exec.Command("go", "build", "-buildvcs=true", "-trimpath", "-o", bin, "./cmd/floodgate")
	build.Dir = dir
	// GOFLAGS may say -buildvcs=false; a release build stamps the commit.
	// Static, as the image's is (and TestStaticBinaryInAnEmptyRoot's, whose
	// compiled packages this build then shares).
	build.Env = append(os.Environ(), append([]string{"GOFLAGS=", "CGO_ENABLED=0"}, env...)...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin, rev
}

// TestVersionNamesTheCommit builds floodgate from a git checkout as a
// release does and runs it: floodgate version names the module version,
// the commit ("-dirty" once a file differs from it), the Go version and the
// commit's date, and serve's /metrics carries floodgate_build_info with
// the same commit.
func TestVersionNamesTheCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds floodgate twice")
	}
	bin, rev := buildFromClone(t, nil)
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("floodgate version: %v", err)
	}
	want := regexp.MustCompile(`^floodgate v0\.0\.0-\d{14}-` + rev[:12] + `\ncommit: ` + rev + `\ngo:     go\S+\ndate:   \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n$`)
	if !want.Match(out) {
		t.Errorf("floodgate version:\n%s\nwant it to match %s", out, want)
	}

	cfg := writeConfig(t, "version: 1\nroutes:\n  - {name: all, match: {paths: [\"/**\"]}, upstream: none}\n")
	cmd := exec.Command(bin, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--ops-listen", "127.0.0.1:0", "--log-level", "error")
	p := startProcCmd(t, cmd)
	metrics := metricsText(t, p.admin)
	line := regexp.MustCompile(`(?m)^floodgate_build_info\{.*\} 1$`).FindString(metrics)
	if !strings.Contains(line, `commit="`+rev+`"`) || !strings.Contains(line, `go_version="go`) || !strings.Contains(line, `version="v0.0.0-`) {
		t.Errorf("floodgate_build_info of the built serve: %q, want the commit %s, the Go and module versions", line, rev)
	}

	dirty, _ := buildFromClone(t, func(dir string) {
		f := filepath.Join(dir, "README.md")
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, append(b, "\nA change not committed.\n"...), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	out, err = exec.Command(dirty, "version").Output()
	if err != nil || !strings.Contains(string(out), "\ncommit: "+rev+"-dirty\n") {
		t.Errorf("floodgate version of a modified tree: %v\n%s\nwant commit %s-dirty", err, out, rev)
	}
}

// TestVersionOfThisBinary: floodgate version and floodgate_build_info say
// the Go version that built them, in serve and in rls.
func TestVersionOfThisBinary(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "floodgate ") || !strings.Contains(out.String(), "\ngo:     "+runtime.Version()+"\n") {
		t.Errorf("floodgate version:\n%s", out.String())
	}
	build := regexp.MustCompile(`(?m)^floodgate_build_info\{commit="[^"]+",go_version="` + regexp.QuoteMeta(runtime.Version()) + `",version="[^"]+"\} 1$`)
	cfg := writeConfig(t, "version: 1\nroutes:\n  - {name: all, match: {paths: [\"/**\"]}, upstream: none}\n")
	_, admin, _, _ := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "error")
	if m := metricsText(t, admin); !build.MatchString(m) {
		t.Errorf("serve's /metrics has no floodgate_build_info for %s", runtime.Version())
	}
	dir := t.TempDir()
	writeRuntime(t, dir, map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n"})
	p := startRLS(t, rlsEnvFor(dir, map[string]string{"BACKEND_TYPE": "memory"}))
	if _, m := httpGet(t, p.debug+"/metrics"); !build.MatchString(m) {
		t.Errorf("rls's /metrics has no floodgate_build_info for %s", runtime.Version())
	}
}

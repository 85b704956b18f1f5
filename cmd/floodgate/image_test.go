//go:build linux

package main

import (
	"bufio"
	"debug/elf"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStaticBinaryInAnEmptyRoot runs floodgate as the container image
// runs it: the binary built as the Dockerfile builds it (CGO_ENABLED=0,
// -trimpath) is static, and started with the root directory changed to
// one that holds only the binary, the policy file and the CA certificates
// (no time zone database, no libc, no /proc), read-only, as the image's
// user (65532), it serves: a limit answers 429 after its burst, and a
// calendar quota in Asia/Kolkata counts per day in that zone (its
// Retry-After is the time until midnight there). The zone comes from the
// time zone database inside the binary (time/tzdata).
func TestStaticBinaryInAnEmptyRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds floodgate")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("changing the root directory takes root, and CI runs as root")
		}
		t.Skip("changing the root directory takes root")
	}
	root := t.TempDir()
	bin := filepath.Join(root, "floodgate")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/floodgate")
	build.Dir = filepath.Join("..", "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	libs, _ := f.ImportedLibraries()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the binary asks for a dynamic loader")
		}
	}
	f.Close()
	if len(libs) > 0 {
		t.Errorf("the binary needs shared libraries: %v", libs)
	}
	files := map[string]string{
		"etc/floodgate/floodgate.yaml": `version: 1
routes:
  - {name: all, match: {paths: ["/**"]}, upstream: none}
limits:
  - {name: burst, rate: 1, per: 1h, burst: 3, key: client_ip, match: {paths: ["/burst"]}}
  - {name: daily, algorithm: quota, limit: 2, period: DAY, time_zone: Asia/Kolkata, key: client_ip, match: {paths: ["/quota"]}}
`,
	}
	if ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		files["etc/ssl/certs/ca-certificates.crt"] = string(ca)
	}
	for name, text := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing else: the process finds no zoneinfo, no libc, no /proc.
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if e.Name() != "floodgate" && e.Name() != "etc" {
			t.Fatalf("the root holds %s", e.Name())
		}
	}
	// Read-only for the process, as readOnlyRootFilesystem makes it.
	if err := os.Chmod(root, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(root, 0o755) })

	cmd := exec.Command("/floodgate", "serve", "--config", "/etc/floodgate/floodgate.yaml",
		"--listen", "127.0.0.1:0", "--admin-listen", "off", "--ops-listen", "127.0.0.1:0", "--watch=false", "--log-level", "warn")
	cmd.Dir = "/"
	cmd.Env = []string{} // no ZONEINFO, no TZ: what the image's process has
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
	})
	urls := make(chan [2]string, 1)
	go func() {
		var gw string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := regexp.MustCompile(`gateway on (http://\S+)`).FindStringSubmatch(sc.Text()); m != nil {
				gw = m[1]
			}
			if m := regexp.MustCompile(`ops on (http://\S+)`).FindStringSubmatch(sc.Text()); m != nil {
				urls <- [2]string{gw, m[1]}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var gw, ops string
	select {
	case u := <-urls:
		gw, ops = u[0], u[1]
	case err := <-exited:
		t.Fatalf("floodgate in the empty root ended: %v\n%s", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("floodgate in the empty root did not start:\n%s", stderr.String())
	}

	if code, _, body := get(t, ops+"/readyz"); code != 200 {
		t.Errorf("/readyz: %d %q", code, body)
	}
	var got []string
	for range 5 {
		code, _, _ := get(t, gw+"/burst")
		got = append(got, strconv.Itoa(code))
	}
	// upstream: none answers 404 to what the limits let through.
	if s := strings.Join(got, " "); s != "404 404 404 429 429" {
		t.Errorf("a burst of 3: %s, want 404 404 404 429 429", s)
	}
	got = got[:0]
	var hdr http.Header
	for range 3 {
		var code int
		code, hdr, _ = get(t, gw+"/quota")
		got = append(got, strconv.Itoa(code))
	}
	if s := strings.Join(got, " "); s != "404 404 429" {
		t.Errorf("a quota of 2 a day: %s, want 404 404 429", s)
	}
	kolkata, err := time.LoadLocation("Asia/Kolkata") // this test binary embeds the database too
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().In(kolkata)
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, kolkata)
	retry, err := strconv.Atoi(hdr.Get("Retry-After"))
	if want := time.Until(midnight).Seconds(); err != nil || float64(retry) < want-10 || float64(retry) > want+10 {
		t.Errorf("the quota's Retry-After: %q, want about %.0f s, the time until midnight in Kolkata", hdr.Get("Retry-After"), want)
	}
	if code, _, body := get(t, ops+"/metrics"); code != 200 || !strings.Contains(body, "floodgate_build_info{") {
		t.Errorf("/metrics: %d, floodgate_build_info missing", code)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("after SIGTERM: %v, want exit status 0\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit after SIGTERM:\n%s", stderr.String())
	}
}

// TestDockerfile holds the Dockerfile to what TestStaticBinaryInAnEmptyRoot
// tries: a static build with -trimpath, an empty base with the CA
// certificates, a numeric user that is not root, and a command whose flags
// serve takes, with the ops listener reachable from outside the container.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{"CGO_ENABLED=0 go build -trimpath", "FROM scratch", "/etc/ssl/certs/ca-certificates.crt",
		"internal/buildinfo.commit=${COMMIT}", `ENTRYPOINT ["/usr/local/bin/floodgate"]`} {
		if !strings.Contains(text, want) {
			t.Errorf("the Dockerfile has no %q", want)
		}
	}
	user := regexp.MustCompile(`(?m)^USER (\d+):(\d+)$`).FindStringSubmatch(text)
	if user == nil || user[1] == "0" || user[2] == "0" {
		t.Errorf("the Dockerfile's USER %v is not a numeric user other than root", user)
	}
	m := regexp.MustCompile(`(?m)^CMD \[(.*)\]$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatal("the Dockerfile has no CMD")
	}
	var args []string
	for _, a := range strings.Split(m[1], ",") {
		args = append(args, strings.Trim(strings.TrimSpace(a), `"`))
	}
	if args[0] != "serve" {
		t.Fatalf("CMD %v does not run serve", args)
	}
	flags, err := parseServeFlags(args[1:], io.Discard)
	if err != nil {
		t.Fatalf("CMD's flags: %v", err)
	}
	if !strings.HasPrefix(flags.OpsListen, ":") || !strings.HasPrefix(flags.Listen, ":") {
		t.Errorf("CMD listens on %q and %q: a probe from outside the container reaches neither", flags.Listen, flags.OpsListen)
	}
	if !strings.Contains(text, "COPY --from=build --chown=65532:65532 /out/var/lib/floodgate") {
		t.Error("the image's state directory does not belong to its user")
	}
	ignore, err := os.ReadFile(filepath.Join("..", "..", ".dockerignore"))
	if err != nil || !strings.Contains(string(ignore), ".git\n") {
		t.Errorf(".dockerignore leaves .git in the build context: %v", err)
	}
}

package deploy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// badDescriptors is a descriptor file that does not load (an unknown unit).
const badDescriptors = `
descriptors:
  shop.yaml: |
    domain: shop
    descriptors:
      - key: client
        rate_limit: {unit: fortnight, requests_per_unit: 3}
`

// TestChartRatelimitPodNotReadyWithoutDescriptors runs floodgate rls as the
// chart's ratelimit mode runs it (its environment, its descriptors laid out
// as the kubelet lays out the ConfigMap) and asks its probes as the kubelet
// would. A pod whose descriptor files do not load answers every request
// with an error: it must not become ready, so that a rolling update of a
// bad ConfigMap stops at the first new pod while the old ones keep serving,
// and it must not be restarted for it either, so that it becomes ready as
// soon as a good version arrives. A pod that runs a good version and is
// given a bad one keeps the good one and stays ready.
func TestChartRatelimitPodNotReadyWithoutDescriptors(t *testing.T) {
	bin := binary(t)
	o := render(t, values(t, "mode: ratelimit"+badDescriptors))
	d := o.deployment(t)
	c := d.Spec.Template.Spec.Containers[0]
	root := t.TempDir()
	var volDir string
	for _, vm := range c.VolumeMounts {
		if vm.Name == "descriptors" {
			volDir = filepath.Join(root, vm.MountPath)
		}
	}
	if volDir == "" {
		t.Fatal("no descriptors mount")
	}
	writeConfigMapVolume(t, volDir, o.configMaps["fg-floodgate-descriptors"].Data)

	// The chart's environment, on loopback ports of the test's choosing.
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, e := range c.Env {
		switch e.Name {
		case "HOST", "GRPC_HOST", "DEBUG_HOST":
			env = append(env, e.Name+"=127.0.0.1")
		case "PORT", "GRPC_PORT", "DEBUG_PORT":
			env = append(env, e.Name+"=0")
		case "RUNTIME_ROOT":
			env = append(env, e.Name+"="+filepath.Join(root, e.Value))
		default:
			env = append(env, e.Name+"="+e.Value)
		}
	}
	lines := startProcessEnv(t, "floodgate rls", bin, []string{"rls"}, env, regexp.MustCompile(`debug \(`))
	addr := map[string]string{} // container port name → the address serving it
	for _, l := range lines {
		for name, re := range map[string]*regexp.Regexp{
			"grpc":  regexp.MustCompile(`gRPC \(RLS v3\) on (\S+)`),
			"http":  regexp.MustCompile(`HTTP \(/json, /healthcheck\) on (\S+)`),
			"debug": regexp.MustCompile(`debug \(\S+ \S+ \S+\) on (\S+)`),
		} {
			if m := re.FindStringSubmatch(l); m != nil {
				addr[name] = m[1]
			}
		}
	}
	if len(addr) != 3 {
		t.Fatalf("floodgate rls said %q", lines)
	}
	probe := func(what string, p *corev1.Probe) bool {
		t.Helper()
		if p == nil {
			t.Fatalf("no %s probe", what)
		}
		port := func(ip intstr.IntOrString) string {
			for _, cp := range c.Ports {
				if ip.Type == intstr.String && cp.Name == ip.StrVal || ip.Type == intstr.Int && cp.ContainerPort == ip.IntVal {
					return addr[cp.Name]
				}
			}
			t.Fatalf("%s probe port %s is not a container port", what, ip.String())
			return ""
		}
		switch {
		case p.HTTPGet != nil:
			// The kubelet counts 200 to 399 as success.
			resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + port(p.HTTPGet.Port) + p.HTTPGet.Path)
			if err != nil {
				return false
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode >= 200 && resp.StatusCode < 400
		case p.TCPSocket != nil:
			conn, err := net.DialTimeout("tcp", port(p.TCPSocket.Port), 5*time.Second)
			if err != nil {
				return false
			}
			conn.Close()
			return true
		}
		t.Fatalf("%s probe %+v: neither an HTTP GET nor a TCP socket", what, p)
		return false
	}
	decide := func() string {
		t.Helper()
		resp, err := http.Post("http://"+addr["http"]+"/json", "application/json",
			strings.NewReader(`{"domain":"shop","descriptors":[{"entries":[{"key":"client","value":"a"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}

	// The descriptors do not load: every request is an error.
	if got := decide(); !strings.HasPrefix(got, "400 ") {
		t.Fatalf("POST /json with descriptors that do not load: %s", got)
	}
	if probe("readiness", c.ReadinessProbe) {
		t.Errorf("readiness probe %s succeeds while the descriptor files do not load: the pod is ready and answers every request with an error", describeProbe(c.ReadinessProbe))
	}
	if !probe("liveness", c.LivenessProbe) {
		t.Errorf("liveness probe %s fails while the descriptor files do not load: the kubelet restarts the pod (and backs off) instead of letting it take the good version when it comes", describeProbe(c.LivenessProbe))
	}

	// A good version arrives: the pod takes it and is ready.
	updateConfigMapVolume(t, volDir, 1, map[string]string{"shop.yaml": "domain: shop\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"})
	waitFor(t, 20*time.Second, "the pod to become ready on a good version", func() bool {
		return probe("readiness", c.ReadinessProbe) && strings.HasPrefix(decide(), "200 ")
	})
	if got := decide(); !strings.HasPrefix(got, "200 ") || !strings.Contains(got, `"requestsPerUnit":3`) {
		t.Fatalf("POST /json with the good version: %s", got)
	}

	// A bad version again: the running one stays, and so does the pod.
	updateConfigMapVolume(t, volDir, 2, o.configMaps["fg-floodgate-descriptors"].Data)
	time.Sleep(3 * time.Second) // past the watch's look at the new version
	if !probe("readiness", c.ReadinessProbe) || !probe("liveness", c.LivenessProbe) {
		t.Error("a pod running a good version fails its probes once given a bad one")
	}
	if got := decide(); !strings.HasPrefix(got, "200 ") || !strings.Contains(got, `"requestsPerUnit":3`) {
		t.Errorf("POST /json after a bad version: %s, want the good version's answer", got)
	}
}

// describeProbe says what a probe asks.
func describeProbe(p *corev1.Probe) string {
	switch {
	case p.HTTPGet != nil:
		return fmt.Sprintf("GET %s on port %s", p.HTTPGet.Path, p.HTTPGet.Port.String())
	case p.TCPSocket != nil:
		return "a TCP connection to port " + p.TCPSocket.Port.String()
	}
	return p.String()
}

// updateConfigMapVolume replaces the files of a volume laid out by
// writeConfigMapVolume as the kubelet's atomic writer does: the new files
// in a new timestamped directory (n tells it apart), ..data_tmp linked to
// it and renamed over ..data, links for new names, the old directory
// removed.
func updateConfigMapVolume(t *testing.T, dir string, n int, data map[string]string) {
	t.Helper()
	old, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	ts := filepath.Join(dir, fmt.Sprintf("..2026_12_01_00_00_%02d.000000001", n))
	if err := os.MkdirAll(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range data {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range data {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds, failing t after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// opsPaths are the paths the ops listener (server.ops_listen) serves.
var opsPaths = []string{"/healthz", "/readyz", "/metrics"}

const (
	adminToken = "admin-token-0123456789abcdef"
	checkToken = "check-token-0123456789abcdef"
	redisURL   = "redis://:s3cret@redis.data.svc:6379/0"
)

// modes are the renderings every test below checks: each mode, on the
// memory store and on Redis, with every optional object turned on.
var modes = []struct {
	name, values string
}{
	{"gateway", `mode: gateway` + policy},
	{"gateway-redis", `
mode: gateway
replicaCount: 3
store: {type: redis, redis: {url: "` + redisURL + `"}}
admin: {tokens: {ops: ` + adminToken + `}}
autoscaling: {enabled: true, minReplicas: 3}
serviceMonitor: {enabled: true}
` + policy},
	{"decision", `
mode: decision
checkAPI: {tokens: {envoy: ` + checkToken + `}}
serviceMonitor: {enabled: true}
` + descriptors},
	{"decision-redis", `
mode: decision
store: {type: redis, redis: {existingSecret: redis-credentials, existingSecretKey: uri}}
checkAPI: {tokenHashes: [{name: envoy, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}]}
` + policy + descriptors},
	{"ratelimit", `mode: ratelimit` + descriptors},
	{"ratelimit-redis", `
mode: ratelimit
store: {type: redis, redis: {url: "redis.data.svc:6379", auth: "s3cret"}}
env: {LOG_LEVEL: debug, SHADOW_MODE: "true"}
autoscaling: {enabled: true}
serviceMonitor: {enabled: true}
` + descriptors},
}

// policy and descriptors are values of the renderings: the school example's
// kind of policy, and a descriptor file.
const (
	policy = `
policy:
  version: 1
  server:
    trusted_proxies: [10.0.0.0/8]
    store_timeout: 100ms
  routes:
    - name: students
      match: {paths: ["/students/**"]}
      upstream: http://school.apps.svc:8080
  limits:
    - name: per-ip
      rate: 100
      per: 1s
      burst: 200
      key: client_ip
`
	descriptors = `
descriptors:
  shop.yaml: |
    domain: shop
    descriptors:
      - key: client
        rate_limit: {unit: minute, requests_per_unit: 3}
`
)

// TestChartRendersStrictly renders the chart in each mode and decodes every
// manifest strictly into k8s.io/api's types (and prometheus-operator's for
// the ServiceMonitor); it checks that every reference between them holds.
func TestChartRendersStrictly(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			vals := values(t, m.values)
			o := render(t, vals)
			d := o.deployment(t)
			pod := d.Spec.Template.Spec
			if len(pod.Containers) != 1 {
				t.Fatalf("%d containers", len(pod.Containers))
			}
			c := pod.Containers[0]

			// Every mount names a volume; every volume names an object
			// the chart makes or one the values name.
			vols := map[string]corev1.Volume{}
			for _, v := range pod.Volumes {
				vols[v.Name] = v
				switch {
				case v.ConfigMap != nil:
					if _, ok := o.configMaps[v.ConfigMap.Name]; !ok {
						t.Errorf("volume %s: no ConfigMap %s", v.Name, v.ConfigMap.Name)
					}
				case v.Secret != nil:
					if _, ok := o.secrets[v.Secret.SecretName]; !ok && v.Secret.SecretName != "redis-credentials" {
						t.Errorf("volume %s: no Secret %s", v.Name, v.Secret.SecretName)
					}
				}
			}
			for _, vm := range c.VolumeMounts {
				if _, ok := vols[vm.Name]; !ok {
					t.Errorf("mount %s: no such volume", vm.Name)
				}
			}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name != "redis-credentials" {
					o.secretValue(t, e.ValueFrom.SecretKeyRef)
				}
			}

			// The Service's ports name the container's; the selector
			// selects the pods.
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			if len(o.services) != 1 {
				t.Fatalf("%d Services", len(o.services))
			}
			for _, p := range o.services[0].Spec.Ports {
				if _, ok := ports[p.TargetPort.StrVal]; !ok {
					t.Errorf("Service port %s targets %q, not a container port", p.Name, p.TargetPort.String())
				}
			}
			for k, v := range o.services[0].Spec.Selector {
				if d.Spec.Template.Labels[k] != v || d.Spec.Selector.MatchLabels[k] != v {
					t.Errorf("Service selects %s=%s, which the pods do not carry", k, v)
				}
			}
			if pod.ServiceAccountName != o.serviceAccounts[0].Name {
				t.Errorf("pods run as %s, the chart makes %s", pod.ServiceAccountName, o.serviceAccounts[0].Name)
			}

			// The PodDisruptionBudget, the HPA and the ServiceMonitor
			// point at the Deployment and its ports.
			if len(o.pdbs) != 1 || o.pdbs[0].Spec.MaxUnavailable.IntValue() != 1 {
				t.Errorf("PodDisruptionBudgets %v, want one with maxUnavailable 1", o.pdbs)
			}
			for _, h := range o.hpas {
				if h.Spec.ScaleTargetRef.Name != d.Name || h.Spec.ScaleTargetRef.Kind != "Deployment" {
					t.Errorf("HPA scales %v", h.Spec.ScaleTargetRef)
				}
				if d.Spec.Replicas != nil {
					t.Errorf("with an HPA the Deployment sets replicas %d", *d.Spec.Replicas)
				}
			}
			if wantHPA := field(vals, "autoscaling", "enabled") == true; wantHPA != (len(o.hpas) == 1) {
				t.Errorf("%d HPAs, autoscaling %v", len(o.hpas), wantHPA)
			}
			if wantSM := field(vals, "serviceMonitor", "enabled") == true; wantSM != (len(o.serviceMonitors) == 1) {
				t.Errorf("%d ServiceMonitors, serviceMonitor %v", len(o.serviceMonitors), wantSM)
			}
			for _, sm := range o.serviceMonitors {
				for _, ep := range sm.Spec.Endpoints {
					if _, ok := ports[ep.Port]; !ok || ep.Path != "/metrics" {
						t.Errorf("ServiceMonitor scrapes port %q path %q", ep.Port, ep.Path)
					}
				}
			}
			if !strings.Contains(o.notes, "Floodgate runs in") {
				t.Errorf("NOTES: %q", o.notes)
			}
		})
	}
}

// TestChartSecurityContext checks that the pods run as a non-root user
// on a read-only root file system, without privileges or capabilities,
// under the runtime's seccomp profile.
func TestChartSecurityContext(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			checkSecurity(t, render(t, values(t, m.values)).deployment(t))
		})
	}
}

// checkSecurity checks that d's pods run as a non-root user on a read-only
// root file system, without privileges or capabilities, under the
// runtime's seccomp profile, with resources.
func checkSecurity(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	ps := d.Spec.Template.Spec.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser == 0 {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and a non-zero user", ps)
	}
	if ps == nil || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccompProfile: want RuntimeDefault")
	}
	if d.Spec.Template.Spec.AutomountServiceAccountToken == nil || *d.Spec.Template.Spec.AutomountServiceAccountToken {
		t.Errorf("the service account token is mounted; floodgate never calls the API server")
	}
	sc := d.Spec.Template.Spec.Containers[0].SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no container securityContext")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Error("container: runAsNonRoot is not true")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("container: readOnlyRootFilesystem is not true")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("container: allowPrivilegeEscalation is not false")
	case sc.Privileged != nil && *sc.Privileged:
		t.Error("container: privileged")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("container capabilities %+v: want drop [ALL] and none added", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("container: seccompProfile is not RuntimeDefault")
	}
	// With a read-only root, what floodgate writes (the admin API's keys
	// file, temporary files) goes to an emptyDir; every other mount is
	// read-only.
	c := d.Spec.Template.Spec.Containers[0]
	for _, vm := range c.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name && v.EmptyDir == nil && !vm.ReadOnly {
				t.Errorf("mount %s at %s is writable", vm.Name, vm.MountPath)
			}
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want a CPU request and a memory limit", c.Resources)
	}
}

// TestChartProbes checks that the probes of floodgate serve name paths the
// ops listener serves, on the port of server.ops_listen, which the chart
// sets to listen beyond loopback; and that floodgate rls's readiness is
// envoyproxy/ratelimit's /healthcheck on its HTTP port, unhealthy until
// descriptor files load, and its liveness a connection to that port.
func TestChartProbes(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			o := render(t, values(t, m.values))
			c := o.deployment(t).Spec.Template.Spec.Containers[0]
			port := func(p intstr.IntOrString) int32 {
				for _, cp := range c.Ports {
					if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
						return cp.ContainerPort
					}
				}
				t.Fatalf("probe port %s is not a container port", p.String())
				return 0
			}
			if strings.HasPrefix(m.name, "ratelimit") {
				env := map[string]string{}
				for _, e := range c.Env {
					env[e.Name] = e.Value
				}
				if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthcheck" || str(port(p.HTTPGet.Port)) != env["PORT"] {
					t.Errorf("readiness probe %+v: want GET /healthcheck on PORT (%s)", p, env["PORT"])
				}
				if env["HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"] != "true" {
					t.Errorf("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED %q: a pod whose descriptor files do not load would be ready", env["HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"])
				}
				// Liveness does not follow the descriptor files: a pod
				// waiting for good ones is not restarted.
				if p := c.LivenessProbe; p == nil || p.TCPSocket == nil || str(port(p.TCPSocket.Port)) != env["PORT"] {
					t.Errorf("liveness probe %+v: want a TCP connection to PORT (%s)", p, env["PORT"])
				}
				return
			}
			_, policy := o.policyOf(t)
			ops := str(field(policy, "server", "ops_listen"))
			if ops != "0.0.0.0:9102" {
				t.Errorf("server.ops_listen %q, want 0.0.0.0:9102 (probes and scrapes come from other pods)", ops)
			}
			checkServeProbes(t, c, ops)
		})
	}
}

// checkServeProbes checks that c's probes are GETs of /healthz and
// /readyz on the port of the ops listener, ops.
func checkServeProbes(t *testing.T, c corev1.Container, ops string) {
	t.Helper()
	port := func(p intstr.IntOrString) int32 {
		for _, cp := range c.Ports {
			if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
				return cp.ContainerPort
			}
		}
		t.Fatalf("probe port %s is not a container port", p.String())
		return 0
	}
	probes := map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe}
	for what, p := range probes {
		if p == nil || p.HTTPGet == nil {
			t.Fatalf("%s probe %+v: want an HTTP GET", what, p)
		}
		if !slices.Contains(opsPaths, p.HTTPGet.Path) || p.HTTPGet.Path == "/metrics" {
			t.Errorf("%s probe path %q: the ops listener serves %v", what, p.HTTPGet.Path, opsPaths)
		}
		if got := ":" + str(port(p.HTTPGet.Port)); !strings.HasSuffix(ops, got) {
			t.Errorf("%s probe on port %s, the ops listener is %s", what, got, ops)
		}
	}
	if c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("liveness %s, readiness %s: want /healthz and /readyz", c.LivenessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path)
	}
}

// TestChartPolicyPassesCheck writes the rendered policy and descriptor
// files as the kubelet lays out a ConfigMap volume (files that are links
// into a ..data directory) and runs the real floodgate on them: floodgate
// check on the policy, floodgate rls --check on the descriptor files with
// the Deployment's own environment.
func TestChartPolicyPassesCheck(t *testing.T) {
	bin := binary(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			o := render(t, values(t, m.values))
			d := o.deployment(t)
			c := d.Spec.Template.Spec.Containers[0]
			root := t.TempDir()
			mounts := map[string]string{}
			for _, vm := range c.VolumeMounts {
				mounts[vm.Name] = vm.MountPath
			}
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.ConfigMap != nil {
					writeConfigMapVolume(t, filepath.Join(root, mounts[v.Name]), o.configMaps[v.ConfigMap.Name].Data)
				}
			}
			if strings.HasPrefix(m.name, "ratelimit") {
				env := []string{"PATH=" + os.Getenv("PATH")}
				for _, e := range c.Env {
					val := e.Value
					if e.ValueFrom != nil {
						val = o.secretValue(t, e.ValueFrom.SecretKeyRef)
					}
					if e.Name == "RUNTIME_ROOT" {
						val = filepath.Join(root, val)
					}
					env = append(env, e.Name+"="+val)
				}
				rlsCheck(t, bin, env, "1 domains: [shop]")
				return
			}
			if !slices.Equal(c.Args[:2], []string{"serve", "--config=/etc/floodgate/policy/policy.yaml"}) {
				t.Fatalf("args %v", c.Args)
			}
			policyPath := filepath.Join(root, "etc/floodgate/policy/policy.yaml")
			check(t, bin, policyPath)
			if m.name == "decision" || m.name == "decision-redis" {
				_, p := o.policyOf(t)
				rlsConfig := field(p, "server", "rls_config").([]any)
				descDir := filepath.Join(filepath.Dir(policyPath), str(rlsConfig[0]))
				if got := filepath.Join(root, mounts["descriptors"]); descDir != got {
					t.Fatalf("server.rls_config is %s, the descriptors are mounted at %s", descDir, got)
				}
				want := "1 domains: [shop]"
				rlsCheck(t, bin, []string{"PATH=" + os.Getenv("PATH"), "RUNTIME_ROOT=" + filepath.Dir(filepath.Dir(descDir)),
					"RUNTIME_SUBDIRECTORY=" + filepath.Base(filepath.Dir(descDir)), "RUNTIME_APPDIRECTORY=" + filepath.Base(descDir),
					"RUNTIME_IGNOREDOTFILES=true", "BACKEND_TYPE=memory", "USE_STATSD=false"}, want)
			}
		})
	}
}

// writeConfigMapVolume lays data out in dir as the kubelet does: the files
// in a timestamped directory, ..data a link to it, and each name a link
// to ..data/name.
func writeConfigMapVolume(t *testing.T, dir string, data map[string]string) {
	t.Helper()
	ts := filepath.Join(dir, "..2026_12_01_00_00_00.000000001")
	if err := os.MkdirAll(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range data {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// check runs floodgate check on the policy at path.
func check(t *testing.T, bin, path string) {
	t.Helper()
	out, err := exec.Command(bin, "check", "--config", path).CombinedOutput()
	if err != nil {
		t.Fatalf("floodgate check: %v\n%s", err, out)
	}
}

// rlsCheck runs floodgate rls --check in the environment env and wants
// its report to name the domains loaded.
func rlsCheck(t *testing.T, bin string, env []string, want string) {
	t.Helper()
	cmd := exec.Command(bin, "rls", "--check")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("floodgate rls --check: %v, want %q in\n%s", err, want, out)
	}
}

// TestChartLint runs Helm's linter on the chart, in each mode, with its
// warnings counted as errors (helm lint --strict).
func TestChartLint(t *testing.T) {
	for _, m := range modes {
		lint := action.NewLint()
		lint.Strict = true
		lint.Namespace = "edge"
		res := lint.Run([]string{chartDir}, values(t, m.values))
		for _, msg := range res.Messages {
			t.Logf("%s: %s", m.name, msg)
		}
		if len(res.Errors) > 0 {
			t.Errorf("%s: helm lint: %v", m.name, res.Errors)
		}
	}
}

// TestChartRestartOnlyWhenNeeded renders the gateway with changes that
// floodgate serve reloads live (a limit, the admin tokens, trusted
// proxies) and with changes it applies only at start (a timeout of the
// store, the store itself): only the latter change the pods' template, so
// only they roll the pods.
func TestChartRestartOnlyWhenNeeded(t *testing.T) {
	base := `mode: gateway` + policy
	template := func(extra string) string {
		t.Helper()
		vals := values(t, base)
		for k, v := range values(t, extra) {
			if k == "policy" {
				p := vals["policy"].(map[string]any)
				for pk, pv := range v.(map[string]any) {
					if pk == "server" {
						srv := p["server"].(map[string]any)
						for sk, sv := range pv.(map[string]any) {
							srv[sk] = sv
						}
						continue
					}
					p[pk] = pv
				}
				continue
			}
			vals[k] = v
		}
		d := render(t, vals).deployment(t)
		b, err := yaml.Marshal(d.Spec.Template)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	before := template(`{}`)
	for _, live := range []string{
		`{policy: {limits: [{name: per-ip, rate: 5, per: 1s, key: client_ip}]}}`,
		`{admin: {tokens: {ops: ` + adminToken + `}}}`,
		`{policy: {server: {trusted_proxies: [192.168.0.0/16]}}}`,
	} {
		if template(live) != before {
			t.Errorf("%s changes the pods' template: the pods would restart for a change they reload", live)
		}
	}
	for _, restart := range []string{
		`{policy: {server: {store_timeout: 50ms}}}`,
		`{policy: {server: {memory: {max_bytes: 1000000}}}}`,
		`{store: {type: redis, redis: {url: "redis://a:6379"}}}`,
		`{opsListen: "0.0.0.0:9200"}`,
		`{policy: {server: {ops_hosts: [floodgate.ns.svc]}}}`,
		// Read when serve starts (the access log is opened, the store
		// connected, the listeners' TLS and the check API built then).
		`{policy: {server: {access_log: {path: "-"}}}}`,
		`{policy: {server: {redis_eviction: refuse}}}`,
		`{policy: {server: {tls: {cert: /etc/tls/tls.crt, key: /etc/tls/tls.key}}}}`,
		`{policy: {server: {grpc_tls_cert: /etc/tls/tls.crt, grpc_tls_key: /etc/tls/tls.key}}}`,
		`{policy: {server: {api_tls_cert: /etc/tls/tls.crt, api_tls_key: /etc/tls/tls.key}}}`,
		`{policy: {server: {api_auth: none}}}`,
	} {
		if template(restart) == before {
			t.Errorf("%s leaves the pods' template as it was: the pods would keep the old setting", restart)
		}
	}
	a := template(`{store: {type: redis, redis: {url: "redis://a:6379"}}}`)
	b := template(`{store: {type: redis, redis: {url: "redis://b:6379"}}}`)
	if a == b {
		t.Error("a new store URL in the chart's Secret leaves the pods as they were")
	}
}

// TestChartRollsForStartOnlyAdminSettings renders the gateway with
// changes of the admin listener's settings that floodgate serve applies
// only at start (startOnlyChanges in internal/app/serve.go: its host
// names, its TLS files, the keys file): each must change the pods'
// template, or the pods keep the old setting, logging only that it waits
// for a restart. A change of the admin tokens, which serve reloads, must
// not.
func TestChartRollsForStartOnlyAdminSettings(t *testing.T) {
	template := func(admin string) string {
		t.Helper()
		vals := values(t, "mode: gateway"+policy)
		if admin != "" {
			srv := vals["policy"].(map[string]any)["server"].(map[string]any)
			srv["admin"] = values(t, admin)
		}
		b, err := yaml.Marshal(render(t, vals).deployment(t).Spec.Template)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	before := template("")
	for _, restart := range []string{
		`{hosts: [floodgate-admin.example.com]}`,
		`{tls_cert: /etc/tls/tls.crt, tls_key: /etc/tls/tls.key}`,
		`{tls_cert: /etc/tls/tls.crt, tls_key: /etc/tls/tls.key, tls_client_ca: /etc/tls/ca.crt, tls_client_san: ops.example.com}`,
	} {
		if template(restart) == before {
			t.Errorf("policy.server.admin %s leaves the pods' template as it was: serve applies it only at start, so the pods would keep the old setting", restart)
		}
	}
	if template(`{tokens: [{name: ops, sha256: `+sha(adminToken)+`}]}`) != before {
		t.Error("admin tokens in the policy change the pods' template: the pods would restart for a change they reload")
	}
}

// TestChartPodDisruptionBudgetLetsADrainThrough renders budgets that no
// eviction can ever satisfy (kubectl drain and a cluster's node upgrades
// then wait for ever on the node of a pod): maxUnavailable 0, or
// minAvailable as many as the pods (one replica with minAvailable 1, the
// autoscaler's minimum, 100%). The rendering must fail naming the value;
// budgets that let one pod go must render.
func TestChartPodDisruptionBudgetLetsADrainThrough(t *testing.T) {
	redis := "\nstore: {type: redis, redis: {url: \"" + redisURL + "\"}}"
	for _, v := range []string{
		"mode: gateway\npodDisruptionBudget: {maxUnavailable: 0}" + policy,
		"mode: gateway\npodDisruptionBudget: {maxUnavailable: \"0%\"}" + policy,
		"mode: gateway\npodDisruptionBudget: {minAvailable: 1}" + policy,
		"mode: gateway\nreplicaCount: 3\npodDisruptionBudget: {minAvailable: \"100%\"}" + redis + policy,
		"mode: gateway\nreplicaCount: 3\npodDisruptionBudget: {minAvailable: 3}" + redis + policy,
		"mode: gateway\nautoscaling: {enabled: true, minReplicas: 2}\npodDisruptionBudget: {minAvailable: 2}" + redis + policy,
	} {
		_, _, err := renderErr(values(t, v))
		if err == nil || !strings.Contains(err.Error(), "podDisruptionBudget") {
			t.Errorf("%s: %v, want an error naming podDisruptionBudget", v, err)
		}
	}
	for _, v := range []string{
		"mode: gateway" + policy,
		"mode: gateway\nreplicaCount: 3\npodDisruptionBudget: {minAvailable: 2}" + redis + policy,
		"mode: gateway\nreplicaCount: 3\npodDisruptionBudget: {minAvailable: \"50%\"}" + redis + policy,
		"mode: gateway\npodDisruptionBudget: {maxUnavailable: \"25%\"}" + policy,
	} {
		if _, _, err := renderErr(values(t, v)); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
}

// TestChartPodDisruptionBudgetPercentages: Kubernetes' disruption
// controller scales a percentage of minAvailable or maxUnavailable against
// the pods and rounds it up (intstr.GetScaledValueFromIntOrPercent with
// roundUp true, called here as the controller calls it), so minAvailable
// 70% of 2 pods keeps both, and no eviction can pass. The chart rendered
// such budgets (only 100% was refused), and maxUnavailable 00%, which
// lets none go. Every percentage must render exactly when the controller
// would let a pod go, counted on replicaCount or, with an autoscaler, its
// minReplicas (its fewest pods, where a percentage leaves the least room).
func TestChartPodDisruptionBudgetPercentages(t *testing.T) {
	redis := "\nstore: {type: redis, redis: {url: \"" + redisURL + "\"}}"
	blocks := func(field string, pct, pods int) (bool, int) {
		v := intstr.FromString(fmt.Sprintf("%d%%", pct))
		n, err := intstr.GetScaledValueFromIntOrPercent(&v, pods, true)
		if err != nil {
			t.Fatal(err)
		}
		if field == "minAvailable" {
			return n >= pods, n
		}
		return n < 1, n
	}
	for _, c := range []struct {
		field, scale string
		pods         int
		pcts         []int
	}{
		{"minAvailable", "replicaCount: 2", 2, []int{1, 49, 50, 51, 70, 99}},
		{"minAvailable", "replicaCount: 3", 3, []int{33, 34, 66, 67, 70, 90}},
		{"minAvailable", "replicaCount: 4", 4, []int{70, 75, 76}},
		{"minAvailable", "replicaCount: 10", 10, []int{90, 91, 99}},
		{"minAvailable", "autoscaling: {enabled: true, minReplicas: 2, maxReplicas: 10}", 2, []int{50, 51, 70}},
		{"minAvailable", "autoscaling: {enabled: true, minReplicas: 4, maxReplicas: 10}", 4, []int{70, 76}},
		{"maxUnavailable", "replicaCount: 2", 2, []int{0, 1, 49}},
		{"maxUnavailable", "replicaCount: 10", 10, []int{0, 1, 9, 10}},
	} {
		for _, pct := range c.pcts {
			v := fmt.Sprintf("mode: gateway\n%s\npodDisruptionBudget: {%s: \"%d%%\"}%s%s", c.scale, c.field, pct, redis, policy)
			blocked, n := blocks(c.field, pct, c.pods)
			o, _, err := renderErr(values(t, v))
			switch {
			case blocked && err == nil:
				t.Errorf("%s %d%% with %s (%d of %d pods by Kubernetes' rounding): rendered, though no eviction could pass",
					c.field, pct, c.scale, n, c.pods)
			case blocked && !strings.Contains(err.Error(), fmt.Sprintf("podDisruptionBudget.%s %d%% of %d pods", c.field, pct, c.pods)):
				t.Errorf("%s %d%% with %s: %v, want an error naming the value and the pods", c.field, pct, c.scale, err)
			case !blocked && err != nil:
				t.Errorf("%s %d%% with %s (%d of %d pods): %v, want it rendered", c.field, pct, c.scale, n, c.pods, err)
			case !blocked:
				if pdbs := decodeAll(t, o).pdbs; len(pdbs) != 1 {
					t.Errorf("%s %d%% with %s: %d PodDisruptionBudgets", c.field, pct, c.scale, len(pdbs))
				}
			}
		}
	}
	// 70% of two pods is both of them, said in the message.
	_, _, err := renderErr(values(t, "mode: gateway\nreplicaCount: 2\npodDisruptionBudget: {minAvailable: \"70%\"}"+redis+policy))
	if want := "podDisruptionBudget.minAvailable 70% of 2 pods keeps 2 available (Kubernetes rounds a percentage up)"; err == nil ||
		!strings.Contains(err.Error(), want) {
		t.Errorf("minAvailable 70%% of 2 pods: %v, want %q", err, want)
	}
	// Spellings of 0% are 0%; a percentage Kubernetes cannot read is refused
	// by the schema rather than rendered.
	for _, v := range []string{`maxUnavailable: "00%"`, `maxUnavailable: "0.5%"`, `minAvailable: "70"`, `minAvailable: -1`} {
		if _, _, err := renderErr(values(t, "mode: gateway\nreplicaCount: 2\npodDisruptionBudget: {"+v+"}"+redis+policy)); err == nil ||
			!strings.Contains(err.Error(), "podDisruptionBudget") {
			t.Errorf("%s: %v, want an error naming podDisruptionBudget", v, err)
		}
	}
}

// TestChartRefusesValuesThatCannotWork renders values that would make pods
// that cannot start, or a deployment that admits more than its limits: the
// rendering fails with a message naming the value.
func TestChartRefusesValuesThatCannotWork(t *testing.T) {
	for _, c := range []struct{ values, want string }{
		{`mode: proxy`, "mode"},
		{`mode: gateway`, "policy.routes"},
		{`mode: ratelimit`, "descriptors"},
		{`mode: decision` + descriptors, "checkAPI.tokens"},
		{"mode: gateway\nstore: {type: redis}" + policy, "store.redis.url"},
		{"mode: gateway\nautoscaling: {enabled: true}" + policy, "autoscaling needs store.type redis"},
		{"mode: gateway\nstore: {type: redis, redis: {url: \"" + redisURL + "\"}}\nautoscaling: {enabled: true, minReplicas: 12}" + policy, "autoscaling.minReplicas (12) is above autoscaling.maxReplicas (10)"},
		{"mode: gateway\nadmin: {tokenHashes: [{name: x, sha256: nothex}]}" + policy, "sha256"},
		{"mode: gateway\nterminationGracePeriodSeconds: 10" + policy, "terminationGracePeriodSeconds"},
		// The soft memory limit serve sets (server.memory.soft_limit: auto)
		// is 1.1 × max_bytes and at least 8 MiB more: past the container's
		// limit, the kernel kills the process before the collector runs.
		{"mode: gateway\nresources: {limits: {memory: 512Mi}}" + withMaxBytes(536870912), "resources.limits.memory"},
		{"mode: decision\nresources: {limits: {memory: \"1G\"}}\ncheckAPI: {tokens: {envoy: " + checkToken + "}}" + withMaxBytes(1073741824) + descriptors, "resources.limits.memory"},
		{"mode: ratelimit\nterminationGracePeriodSeconds: 15" + descriptors, "terminationGracePeriodSeconds"},
		// The kubelet probes, and Prometheus scrapes, the pod's address:
		// an ops listener on loopback (floodgate serve's own default)
		// would never be ready, and be restarted for ever.
		{"mode: gateway\nopsListen: \"127.0.0.1:9102\"" + policy, "opsListen"},
		{"mode: gateway\nopsListen: \"localhost:9102\"" + policy, "opsListen"},
		{"mode: decision\nopsListen: \"[::1]:9102\"\ncheckAPI: {tokens: {envoy: " + checkToken + "}}" + descriptors, "opsListen"},
		// A misspelt value would be left out without a word, its default
		// used: a grace period, a replica count taken as asked for.
		{"mode: gateway\nterminationGracePeriodSecond: 120" + policy, "terminationGracePeriodSecond"},
		{"mode: gateway\nreplica: 5" + policy, "replica"},
	} {
		_, _, err := renderErr(values(t, c.values))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", c.values, err, c.want)
			continue
		}
		t.Logf("%s", err)
	}
}

// TestChartSecrets checks where the secrets go: the store URL only in a
// Secret, mounted as the file floodgate serve reads with --store-file, or
// in floodgate rls's REDIS_URL and REDIS_AUTH; the admin and check API
// tokens in Secrets, and only their SHA-256 in the policy file.
func TestChartSecrets(t *testing.T) {
	o := render(t, values(t, modes[1].values))
	text, p := o.policyOf(t)
	if strings.Contains(text, "s3cret") || strings.Contains(text, adminToken) {
		t.Errorf("the policy file holds a secret:\n%s", text)
	}
	if got := o.secrets["fg-floodgate-store"].StringData["url"]; got != redisURL {
		t.Errorf("store Secret url %q", got)
	}
	if got := o.secrets["fg-floodgate-admin-tokens"].StringData["ops"]; got != adminToken {
		t.Errorf("admin token Secret %q", got)
	}
	tokens := field(p, "server", "admin", "tokens").([]any)
	if len(tokens) != 1 || str(tokens[0].(map[string]any)["sha256"]) != sha(adminToken) {
		t.Errorf("server.admin.tokens %v, want the SHA-256 of the token", tokens)
	}
	c := o.deployment(t).Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--store-file=/etc/floodgate/store/url") {
		t.Errorf("args %v: no --store-file", c.Args)
	}
	if field(p, "server", "store") != nil {
		t.Errorf("server.store is in the policy file")
	}

	o = render(t, values(t, modes[2].values))
	_, p = o.policyOf(t)
	tokens = field(p, "server", "api_tokens").([]any)
	if len(tokens) != 1 || str(tokens[0].(map[string]any)["sha256"]) != sha(checkToken) ||
		o.secrets["fg-floodgate-check-tokens"].StringData["envoy"] != checkToken {
		t.Errorf("server.api_tokens %v, Secret %v", tokens, o.secrets["fg-floodgate-check-tokens"])
	}

	o = render(t, values(t, modes[5].values))
	env := map[string]string{}
	for _, e := range o.deployment(t).Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil {
			env[e.Name] = o.secretValue(t, e.ValueFrom.SecretKeyRef)
		} else {
			if _, dup := env[e.Name]; dup {
				t.Errorf("%s is set twice", e.Name)
			}
			env[e.Name] = e.Value
		}
	}
	if env["REDIS_URL"] != "redis.data.svc:6379" || env["REDIS_AUTH"] != "s3cret" || env["REDIS_SOCKET_TYPE"] != "tcp" ||
		env["BACKEND_TYPE"] != "redis" || env["LOG_LEVEL"] != "debug" || env["SHADOW_MODE"] != "true" {
		t.Errorf("floodgate rls's environment %v", env)
	}
}

// TestChartPodsDrainBeforeTheyStop checks that a pod taken out of service
// (a rolling update, a node drain) keeps accepting connections until the
// Service's endpoints, kube-proxy and ingresses have stopped sending it new
// ones: floodgate serve and floodgate rls stop accepting at SIGTERM, so the
// pod waits first (a preStop sleep); and that the kubelet's SIGKILL comes
// only after that wait and the process's whole drain.
func TestChartPodsDrainBeforeTheyStop(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			checkDrain(t, render(t, values(t, m.values)).deployment(t))
		})
	}
}

// minPreStop is the least wait before SIGTERM that lets the endpoints'
// removal reach kube-proxy and the load balancers; stateMargin is the
// time left after the drain for closing the stores (the memory store
// writes its state file).
const (
	minPreStop  = 5
	stateMargin = 5
)

// checkDrain checks that d's pods sleep at least minPreStop seconds before
// SIGTERM, and that terminationGracePeriodSeconds covers that sleep, the
// process's drain (--shutdown-timeout of floodgate serve, 30 s by default;
// the 10 s of floodgate rls) and stateMargin.
func checkDrain(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatalf("lifecycle %+v: no preStop sleep; the process stops accepting at SIGTERM, while the endpoints still send it new connections", c.Lifecycle)
	}
	sleep := c.Lifecycle.PreStop.Sleep.Seconds
	if sleep < minPreStop {
		t.Errorf("preStop sleeps %d s, want at least %d", sleep, minPreStop)
	}
	drain := 10 * time.Second // floodgate rls
	if c.Args[0] == "serve" {
		drain = 30 * time.Second
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--shutdown-timeout="); ok {
				var err error
				if drain, err = time.ParseDuration(v); err != nil || drain <= 0 {
					t.Fatalf("%s: %v", a, err)
				}
			}
		}
	}
	grace := int64(30)
	if pod.TerminationGracePeriodSeconds != nil {
		grace = *pod.TerminationGracePeriodSeconds
	}
	if need := sleep + int64(drain/time.Second) + stateMargin; grace < need {
		t.Errorf("terminationGracePeriodSeconds %d < preStop %d s + drain %v + %d s: SIGKILL cuts the requests in flight", grace, sleep, drain, stateMargin)
	}
}

// TestChartLocalFallbackCountsEveryPod checks server.instances, by which
// each pod divides a limit whose on_failure is local while Redis is down:
// it must count every pod that may run, or the pods together admit more
// than the limit (docs/redis.md bounds the over-admission for a right
// count). With an HPA that is maxReplicas, not minReplicas: ten pods each
// allowing a third of a limit admit more than three limits. A rolling
// update runs its surge beside them (Kubernetes' default, 25% rounded up:
// a fourth pod beside three), which the count left out before; Recreate
// runs none, and a count the policy sets stays.
func TestChartLocalFallbackCountsEveryPod(t *testing.T) {
	redis := "\nstore: {type: redis, redis: {url: \"" + redisURL + "\"}}"
	for _, c := range []struct {
		values   string
		want     string
		strategy string // the Deployment's strategy type
		surge    string // its maxSurge ("" for none)
	}{
		{"mode: gateway\nreplicaCount: 3" + redis + policy, "4", "RollingUpdate", "25%"},
		{"mode: gateway" + redis + "\nautoscaling: {enabled: true, minReplicas: 3, maxReplicas: 10}" + policy, "13", "RollingUpdate", "25%"},
		{"mode: gateway\nreplicaCount: 4" + redis + policy, "5", "RollingUpdate", "25%"},
		{"mode: gateway\nreplicaCount: 3" + redis + "\nupdateStrategy: {rollingUpdate: {maxSurge: 2}}" + policy, "5", "RollingUpdate", "2"},
		{"mode: gateway\nreplicaCount: 3" + redis + "\nupdateStrategy: {rollingUpdate: {maxSurge: \"50%\"}}" + policy, "5", "RollingUpdate", "50%"},
		{"mode: gateway\nreplicaCount: 3" + redis + "\nupdateStrategy: {rollingUpdate: {maxSurge: 0, maxUnavailable: 1}}" + policy, "3", "RollingUpdate", "0"},
		{"mode: gateway\nreplicaCount: 3" + redis + "\nupdateStrategy: {type: Recreate}" + policy, "3", "Recreate", ""},
		{"mode: gateway\nreplicaCount: 3" + redis + strings.Replace(policy, "    store_timeout: 100ms\n", "    store_timeout: 100ms\n    instances: 7\n", 1), "7", "RollingUpdate", "25%"},
	} {
		o := render(t, values(t, c.values))
		_, p := o.policyOf(t)
		if got := str(field(p, "server", "instances")); got != c.want {
			t.Errorf("%s\nserver.instances %s, want %s", c.values, got, c.want)
		}
		st := o.deployments[0].Spec.Strategy
		surge := ""
		if st.RollingUpdate != nil && st.RollingUpdate.MaxSurge != nil {
			surge = st.RollingUpdate.MaxSurge.String()
		}
		if string(st.Type) != c.strategy || surge != c.surge {
			t.Errorf("%s\nDeployment strategy %s, maxSurge %q; want %s, %q", c.values, st.Type, surge, c.strategy, c.surge)
		}
	}
}

// withMaxBytes is the policy of the renderings with server.memory.max_bytes
// set to n.
func withMaxBytes(n int) string {
	return strings.Replace(policy, "    store_timeout: 100ms\n", fmt.Sprintf("    store_timeout: 100ms\n    memory: {max_bytes: %d}\n", n), 1)
}

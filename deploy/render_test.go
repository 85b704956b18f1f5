package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "helm/floodgate"

// objects are the manifests of one rendering, decoded strictly into their
// Kubernetes types.
type objects struct {
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	configMaps      map[string]*corev1.ConfigMap
	secrets         map[string]*corev1.Secret
	serviceAccounts []*corev1.ServiceAccount
	pdbs            []*policyv1.PodDisruptionBudget
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	serviceMonitors []*monitoringv1.ServiceMonitor
	notes           string
}

// deployment is the one Deployment of o.
func (o *objects) deployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	if len(o.deployments) != 1 {
		t.Fatalf("%d Deployments, want 1", len(o.deployments))
	}
	return o.deployments[0]
}

// values parses YAML values for a rendering.
func values(t *testing.T, text string) map[string]any {
	t.Helper()
	v := map[string]any{}
	if err := yaml.Unmarshal([]byte(text), &v); err != nil {
		t.Fatalf("values: %v", err)
	}
	return v
}

// render renders the chart with vals as "helm install --dry-run" does
// without a cluster (as helm template does), or returns the error.
func renderErr(vals map[string]any) (string, string, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return "", "", err
	}
	cfg := &action.Configuration{Log: func(string, ...any) {}}
	install := action.NewInstall(cfg)
	install.DryRun = true
	install.ClientOnly = true
	install.Replace = true
	install.ReleaseName = "fg"
	install.Namespace = "edge"
	install.APIVersions = chartutil.VersionSet{"monitoring.coreos.com/v1"}
	rel, err := install.Run(chrt, vals)
	if err != nil {
		return "", "", err
	}
	return rel.Manifest, rel.Info.Notes, nil
}

// render renders the chart with vals and decodes every manifest strictly:
// a field that its type does not have fails the test.
func render(t *testing.T, vals map[string]any) *objects {
	t.Helper()
	manifest, notes, err := renderErr(vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	o := decodeAll(t, manifest)
	o.notes = notes
	return o
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// decodeAll decodes each YAML document of manifest strictly into the
// Kubernetes type its kind names.
func decodeAll(t *testing.T, manifest string) *objects {
	t.Helper()
	o := &objects{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for _, doc := range docSep.Split(manifest, -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("manifest: %v\n%s", err, doc)
		}
		strict := func(into any) {
			t.Helper()
			if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
				t.Fatalf("%s: strict decoding: %v\n%s", head.Kind, err, doc)
			}
		}
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 Deployment":
			d := &appsv1.Deployment{}
			strict(d)
			o.deployments = append(o.deployments, d)
		case "v1 Service":
			s := &corev1.Service{}
			strict(s)
			o.services = append(o.services, s)
		case "v1 ConfigMap":
			c := &corev1.ConfigMap{}
			strict(c)
			o.configMaps[c.Name] = c
		case "v1 Secret":
			s := &corev1.Secret{}
			strict(s)
			o.secrets[s.Name] = s
		case "v1 ServiceAccount":
			s := &corev1.ServiceAccount{}
			strict(s)
			o.serviceAccounts = append(o.serviceAccounts, s)
		case "policy/v1 PodDisruptionBudget":
			p := &policyv1.PodDisruptionBudget{}
			strict(p)
			o.pdbs = append(o.pdbs, p)
		case "autoscaling/v2 HorizontalPodAutoscaler":
			h := &autoscalingv2.HorizontalPodAutoscaler{}
			strict(h)
			o.hpas = append(o.hpas, h)
		case "monitoring.coreos.com/v1 ServiceMonitor":
			s := &monitoringv1.ServiceMonitor{}
			strict(s)
			o.serviceMonitors = append(o.serviceMonitors, s)
		default:
			t.Fatalf("a manifest of kind %s %s, which the tests do not decode:\n%s", head.APIVersion, head.Kind, doc)
		}
	}
	return o
}

// stripComments removes the lines that are only a YAML comment.
func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// secretValue is what a secretKeyRef names in o.
func (o *objects) secretValue(t *testing.T, ref *corev1.SecretKeySelector) string {
	t.Helper()
	s, ok := o.secrets[ref.Name]
	if !ok {
		t.Fatalf("secretKeyRef names Secret %s, which the chart does not make", ref.Name)
	}
	v, ok := s.StringData[ref.Key]
	if !ok {
		t.Fatalf("Secret %s has no key %s", ref.Name, ref.Key)
	}
	return v
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// policyOf is the policy file of a rendering, parsed.
func (o *objects) policyOf(t *testing.T) (string, map[string]any) {
	t.Helper()
	cm, ok := o.configMaps["fg-floodgate-policy"]
	if !ok {
		t.Fatalf("no ConfigMap fg-floodgate-policy")
	}
	text := cm.Data["policy.yaml"]
	p := map[string]any{}
	if err := yaml.Unmarshal([]byte(text), &p); err != nil {
		t.Fatalf("policy.yaml: %v", err)
	}
	return text, p
}

func field(m map[string]any, path ...string) any {
	var v any = m
	for _, k := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

func str(v any) string { return fmt.Sprint(v) }

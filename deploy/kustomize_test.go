package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// kustomizations are the kustomize base and the example overlay.
var kustomizations = []string{"kustomize/base", "kustomize/overlays/example"}

// TestKustomizeFilesDecodeStrictly decodes every file of the base and the
// overlay strictly: the kustomization.yaml files into kustomize's
// Kustomization, the manifests into k8s.io/api's types.
func TestKustomizeFilesDecodeStrictly(t *testing.T) {
	for _, dir := range kustomizations {
		k := &types.Kustomization{}
		b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(b, k); err != nil {
			t.Fatalf("%s/kustomization.yaml: %v", dir, err)
		}
		if errs := k.EnforceFields(); len(errs) > 0 {
			t.Errorf("%s/kustomization.yaml: %v", dir, errs)
		}
		files := k.Resources
		for _, p := range k.Patches {
			files = append(files, p.Path)
		}
		for _, r := range files {
			if strings.HasPrefix(r, "..") {
				continue // a base
			}
			b, err := os.ReadFile(filepath.Join(dir, r))
			if err != nil {
				t.Fatal(err)
			}
			decodeAll(t, string(b))
		}
	}
}

// build runs kustomize (the library kubectl kustomize runs) on dir.
func build(t *testing.T, dir string) *objects {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decodeAll(t, string(out))
}

// TestKustomizeBuilds builds the base and the overlay, decodes what they
// make strictly, checks the pods' security settings, probes and drain, that every
// volume names an object made, and runs floodgate check on the policy.
func TestKustomizeBuilds(t *testing.T) {
	bin := binary(t)
	for _, dir := range kustomizations {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			o := build(t, dir)
			d := o.deployment(t)
			checkSecurity(t, d)
			checkDrain(t, d)
			c := d.Spec.Template.Spec.Containers[0]
			cm, ok := o.configMaps["floodgate-policy"]
			if !ok {
				t.Fatal("no ConfigMap floodgate-policy")
			}
			p := map[string]any{}
			if err := yaml.Unmarshal([]byte(cm.Data["policy.yaml"]), &p); err != nil {
				t.Fatal(err)
			}
			checkServeProbes(t, c, str(field(p, "server", "ops_listen")))
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.ConfigMap != nil && o.configMaps[v.ConfigMap.Name] == nil {
					t.Errorf("volume %s: no ConfigMap %s", v.Name, v.ConfigMap.Name)
				}
				if v.Secret != nil && o.secrets[v.Secret.SecretName] == nil {
					t.Errorf("volume %s: no Secret %s", v.Name, v.Secret.SecretName)
				}
			}
			if len(o.services) != 1 || len(o.pdbs) != 1 {
				t.Errorf("%d Services, %d PodDisruptionBudgets", len(o.services), len(o.pdbs))
			}
			for k, v := range o.services[0].Spec.Selector {
				if d.Spec.Template.Labels[k] != v {
					t.Errorf("the Service selects %s=%s, which the pods do not carry", k, v)
				}
			}
			if o.pdbs[0].Spec.Selector == nil || len(o.pdbs[0].Spec.Selector.MatchLabels) == 0 {
				t.Fatal("the PodDisruptionBudget selects no pods")
			}
			for k, v := range o.pdbs[0].Spec.Selector.MatchLabels {
				if d.Spec.Template.Labels[k] != v {
					t.Errorf("the PodDisruptionBudget selects %s=%s, which the pods do not carry", k, v)
				}
			}
			root := t.TempDir()
			writeConfigMapVolume(t, filepath.Join(root, "policy"), cm.Data)
			check(t, bin, filepath.Join(root, "policy", "policy.yaml"))
			if dir == "kustomize/overlays/example" {
				if *d.Spec.Replicas != 3 || d.Namespace != "edge" || !strings.Contains(strings.Join(c.Args, " "), "--store-file=/etc/floodgate/store/url") {
					t.Errorf("overlay: replicas %d, namespace %q, args %v", *d.Spec.Replicas, d.Namespace, c.Args)
				}
			}
		})
	}
}

// TestKustomizeLocalFallbackCountsEveryPod checks, as
// TestChartLocalFallbackCountsEveryPod does for the chart, that the
// server.instances of a kustomization on Redis counts every pod its
// rollout may run: the replicas and the rolling update's surge above them
// (Kubernetes' default, 25% rounded up, when the Deployment names none).
// A count short of that lets the pods together admit more than a limit
// whose on_failure is local while Redis is down during a rollout.
func TestKustomizeLocalFallbackCountsEveryPod(t *testing.T) {
	for _, dir := range kustomizations {
		o := build(t, dir)
		d := o.deployment(t)
		p := map[string]any{}
		if err := yaml.Unmarshal([]byte(o.configMaps["floodgate-policy"].Data["policy.yaml"]), &p); err != nil {
			t.Fatal(err)
		}
		if field(p, "server", "store") == nil && !strings.Contains(strings.Join(d.Spec.Template.Spec.Containers[0].Args, " "), "--store-file") {
			continue // the memory store: each pod counts alone
		}
		replicas := 1
		if d.Spec.Replicas != nil {
			replicas = int(*d.Spec.Replicas)
		}
		surge := 0
		if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
			ms := intstr.FromString("25%")
			if ru := d.Spec.Strategy.RollingUpdate; ru != nil && ru.MaxSurge != nil {
				ms = *ru.MaxSurge
			}
			var err error
			if surge, err = intstr.GetScaledValueFromIntOrPercent(&ms, replicas, true); err != nil {
				t.Fatal(err)
			}
		}
		got := str(field(p, "server", "instances"))
		if want := fmt.Sprint(replicas + surge); got != want {
			t.Errorf("%s: server.instances %s, want %s (%d replicas and a surge of %d during a rollout)", dir, got, want, replicas, surge)
		}
	}
}

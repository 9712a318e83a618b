package validate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "../helm/prq"

// requiredSet are the values a minimal install must give.
var requiredSet = []string{"--set", "redis.url=redis://redis:6379/0", "--set", "github.appId=1", "--set", "github.webhookSecret=s",
	"--set", "github.privateKey=k", "--set", "openai.apiKey=k", "--set", "adminToken=t"}

// helm runs the Helm CLI pinned in go.mod (go tool helm).
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"tool", "helm"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

func TestChart(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want []string // kinds the render must hold
	}{
		{"defaults", requiredSet, []string{"ConfigMap", "Secret", "Deployment", "Service", "PodDisruptionBudget"}},
		{"everything on, KEDA", append(append([]string{}, requiredSet...), "--set", "ingress.enabled=true", "--set", "metrics.serviceMonitor.enabled=true",
			"--set", "autoscaling.enabled=true", "--set", "autoscaling.mode=keda"), []string{"Ingress", "ServiceMonitor", "ScaledObject"}},
		{"HPA on an external metric", append(append([]string{}, requiredSet...), "--set", "autoscaling.enabled=true", "--set", "autoscaling.mode=hpa"),
			[]string{"HorizontalPodAutoscaler"}},
		{"example: managed Redis", []string{"-f", "../helm/examples/managed-redis.yaml"}, []string{"Ingress", "ServiceMonitor", "ScaledObject"}},
		{"example: Redis chart", []string{"-f", "../helm/examples/redis-chart.yaml"}, []string{"Secret", "HorizontalPodAutoscaler"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := helm(t, append([]string{"lint", "--strict", chartDir}, c.args...)...); err != nil {
				t.Fatal(err)
			}
			out, err := helm(t, append([]string{"template", "prq", chartDir, "--namespace", "prq"}, c.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			objs := decodeAll(t, out)
			kinds := map[string]bool{}
			for _, o := range objs {
				kinds[o.kind] = true
			}
			for _, k := range c.want {
				if !kinds[k] {
					t.Errorf("no %s rendered", k)
				}
			}
			checkWiring(t, objs)
		})
	}
}

// TestChartRefusesMissingRedis: Redis is external, so the chart must say
// so instead of rendering pods that cannot start.
func TestChartRefusesMissingRedis(t *testing.T) {
	_, err := helm(t, "template", "prq", chartDir, "--set", "github.webhookSecret=s", "--set", "github.privateKey=k", "--set", "openai.apiKey=k", "--set", "adminToken=t")
	if err == nil || !strings.Contains(err.Error(), "redis.url (or redis.existingSecret) is required") {
		t.Fatalf("want the missing-Redis error, got %v", err)
	}
}

type object struct {
	kind, name string
	obj        any
}

// decodeAll splits Helm's output and decodes each manifest strictly into
// its Kubernetes type (unknown or misspelt fields fail).
func decodeAll(t *testing.T, out string) []object {
	t.Helper()
	var objs []object
	for _, doc := range strings.Split(out, "\n---") {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		var meta metav1.TypeMeta
		json.Unmarshal(js, &meta)
		var obj any
		switch meta.APIVersion + "/" + meta.Kind {
		case "apps/v1/Deployment":
			obj = &appsv1.Deployment{}
		case "v1/Service":
			obj = &corev1.Service{}
		case "v1/ConfigMap":
			obj = &corev1.ConfigMap{}
		case "v1/Secret":
			obj = &corev1.Secret{}
		case "networking.k8s.io/v1/Ingress":
			obj = &networkingv1.Ingress{}
		case "policy/v1/PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		case "autoscaling/v2/HorizontalPodAutoscaler":
			obj = &autoscalingv2.HorizontalPodAutoscaler{}
		case "keda.sh/v1alpha1/ScaledObject":
			obj = &scaledObject{}
		case "monitoring.coreos.com/v1/ServiceMonitor":
			obj = &serviceMonitor{}
		default:
			t.Fatalf("unexpected manifest %s %s", meta.APIVersion, meta.Kind)
		}
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(obj); err != nil {
			t.Fatalf("%s: %v\n%s", meta.Kind, err, doc)
		}
		var om struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		json.Unmarshal(js, &om)
		if om.Metadata.Name == "" {
			t.Errorf("%s without a name", meta.Kind)
		}
		objs = append(objs, object{kind: meta.Kind, name: om.Metadata.Name, obj: obj})
	}
	return objs
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// checkWiring checks what strict decoding cannot: selectors match pods,
// Secret references exist, the grace period covers the shutdown timeout,
// scaling targets the worker Deployment, the scaling query is prq's.
func checkWiring(t *testing.T, objs []object) {
	t.Helper()
	deps := map[string]*appsv1.Deployment{}
	var secret *corev1.Secret
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *appsv1.Deployment:
			deps[v.Labels["app.kubernetes.io/component"]] = v
		case *corev1.Secret:
			secret = v
		}
	}
	serve, worker := deps["serve"], deps["worker"]
	if serve == nil || worker == nil {
		t.Fatalf("want serve and worker Deployments, got %v", deps)
	}
	matches := func(sel map[string]string, d *appsv1.Deployment) bool {
		for k, v := range sel {
			if d.Spec.Template.Labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	for _, d := range []*appsv1.Deployment{serve, worker} {
		// The image's user is a name (distroless "nonroot"): runAsNonRoot
		// needs a numeric runAsUser, or the kubelet refuses to start it.
		if sc := d.Spec.Template.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
			t.Errorf("%s: wants runAsNonRoot with a numeric non-zero runAsUser", d.Name)
		}
		if !matches(d.Spec.Selector.MatchLabels, d) {
			t.Errorf("%s: selector %v does not match its pods %v", d.Name, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
		}
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil && secret != nil && ref.SecretKeyRef.Name == secret.Name {
				if _, ok := secret.StringData[ref.SecretKeyRef.Key]; !ok {
					t.Errorf("%s: env %s reads key %q the Secret does not have", d.Name, e.Name, ref.SecretKeyRef.Key)
				}
			}
		}
	}
	// The grace period must cover the shutdown timeout given to the worker.
	args := worker.Spec.Template.Spec.Containers[0].Args
	var shutdown time.Duration
	for i, a := range args {
		if a == "--shutdown-timeout" && i+1 < len(args) {
			shutdown, _ = time.ParseDuration(args[i+1])
		}
	}
	grace := worker.Spec.Template.Spec.TerminationGracePeriodSeconds
	if shutdown <= 0 || grace == nil || time.Duration(*grace)*time.Second <= shutdown {
		t.Errorf("worker: terminationGracePeriodSeconds %v must exceed --shutdown-timeout %s", grace, shutdown)
	}
	if serve.Spec.Template.Spec.Containers[0].ReadinessProbe == nil || worker.Spec.Template.Spec.Containers[0].LivenessProbe == nil {
		t.Errorf("serve needs a readiness probe and worker a liveness probe")
	}
	known := knownMetrics(t)
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *corev1.Service:
			if !matches(v.Spec.Selector, serve) {
				t.Errorf("Service %s selects %v, not serve's pods", v.Name, v.Spec.Selector)
			}
		case *policyv1.PodDisruptionBudget:
			if !matches(v.Spec.Selector.MatchLabels, worker) {
				t.Errorf("PodDisruptionBudget %s selects %v, not the workers", v.Name, v.Spec.Selector.MatchLabels)
			}
		case *autoscalingv2.HorizontalPodAutoscaler:
			if v.Spec.ScaleTargetRef.Name != worker.Name || v.Spec.ScaleTargetRef.Kind != "Deployment" {
				t.Errorf("HPA scales %+v, not the workers", v.Spec.ScaleTargetRef)
			}
			if worker.Spec.Replicas != nil {
				t.Errorf("worker replicas are fixed although an autoscaler owns them")
			}
			for _, m := range v.Spec.Metrics {
				if m.External == nil || !known[m.External.Metric.Name] {
					t.Errorf("HPA metric %+v is not one of prq's", m)
				}
			}
		case *scaledObject:
			if v.Spec.ScaleTargetRef.Name != worker.Name {
				t.Errorf("ScaledObject scales %q, not the workers", v.Spec.ScaleTargetRef.Name)
			}
			for _, tr := range v.Spec.Triggers {
				for _, name := range metricNames(t, tr.Metadata["query"]) {
					if !known[name] {
						t.Errorf("ScaledObject query names %q, not one of prq's", name)
					}
				}
				if n, err := strconv.ParseFloat(tr.Metadata["threshold"], 64); err != nil || n <= 0 {
					t.Errorf("ScaledObject threshold %q", tr.Metadata["threshold"])
				}
			}
		case *serviceMonitor:
			if !matchesService(v.Spec.Selector.MatchLabels, objs) {
				t.Errorf("ServiceMonitor selects %v: no Service has those labels", v.Spec.Selector.MatchLabels)
			}
		}
	}
}

func matchesService(sel map[string]string, objs []object) bool {
	for _, o := range objs {
		if s, ok := o.obj.(*corev1.Service); ok {
			all := len(sel) > 0
			for k, v := range sel {
				all = all && s.Labels[k] == v
			}
			if all {
				return true
			}
		}
	}
	return false
}

// The CRDs' types are not in k8s.io/api; these mirror the fields of KEDA's
// ScaledObject (keda.sh/v1alpha1) and the Prometheus Operator's
// ServiceMonitor (monitoring.coreos.com/v1) that the chart may set, so
// strict decoding still catches a misspelt or misplaced field.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion,omitempty"`
			Kind       string `json:"kind,omitempty"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		PollingInterval *int32 `json:"pollingInterval,omitempty"`
		CooldownPeriod  *int32 `json:"cooldownPeriod,omitempty"`
		MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`
		Triggers        []struct {
			Type     string            `json:"type"`
			Name     string            `json:"name,omitempty"`
			Metadata map[string]string `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port        string `json:"port"`
			Path        string `json:"path,omitempty"`
			Interval    string `json:"interval,omitempty"`
			Relabelings []struct {
				TargetLabel string `json:"targetLabel,omitempty"`
				Replacement string `json:"replacement,omitempty"`
			} `json:"relabelings,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

func TestMain(m *testing.M) {
	// go tool helm must run in this module, where go.mod pins it.
	if _, err := os.Stat("go.mod"); err != nil {
		fmt.Fprintln(os.Stderr, "run the tests from deploy/validate")
		os.Exit(2)
	}
	os.Exit(m.Run())
}

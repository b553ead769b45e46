package deploytest

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// kubernetesFile reads a file of the checkout's deploy/kubernetes.
func kubernetesFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// manifests holds the typed objects of a Kubernetes file.
type manifests struct {
	configMaps  []*corev1.ConfigMap
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	pdbs        []*policyv1.PodDisruptionBudget
	cronJobs    []*batchv1.CronJob
}

// decodeManifests strictly decodes every YAML document of a Kubernetes file
// into its k8s.io/api type: an unknown or duplicated field, a wrong type or
// a kind this test does not know is an error.
func decodeManifests(t *testing.T, name string, b []byte) *manifests {
	t.Helper()
	m := &manifests{}
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return m
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%s document %d: %v", name, i, err)
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 ConfigMap":
			o := &corev1.ConfigMap{}
			m.configMaps, obj = append(m.configMaps, o), o
		case "apps/v1 Deployment":
			o := &appsv1.Deployment{}
			m.deployments, obj = append(m.deployments, o), o
		case "v1 Service":
			o := &corev1.Service{}
			m.services, obj = append(m.services, o), o
		case "policy/v1 PodDisruptionBudget":
			o := &policyv1.PodDisruptionBudget{}
			m.pdbs, obj = append(m.pdbs, o), o
		case "batch/v1 CronJob":
			o := &batchv1.CronJob{}
			m.cronJobs, obj = append(m.cronJobs, o), o
		default:
			t.Fatalf("%s document %d: unexpected %q %q", name, i, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("%s document %d (%s): %v", name, i, tm.Kind, err)
		}
	}
}

// selects fails unless sel selects the pod labels lbl.
func selects(t *testing.T, what string, sel *metav1.LabelSelector, lbl map[string]string) {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() || !s.Matches(labels.Set(lbl)) {
		t.Fatalf("%s: selector %v does not select the pods %v (%v)", what, sel, lbl, err)
	}
}

// checkPod checks what both workloads share: one container, non-root, the
// ConfigMap mounted in it, and the S3 keys from the fencepub-credentials
// Secret (as every variable taken from a Secret).
func checkPod(t *testing.T, where string, pod corev1.PodSpec, cm *corev1.ConfigMap) corev1.Container {
	t.Helper()
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", where, len(pod.Containers))
	}
	c := pod.Containers[0]
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Fatalf("%s: pod not runAsNonRoot", where)
	}
	var mounted bool
	for _, vm := range c.VolumeMounts {
		for _, vol := range pod.Volumes {
			if vol.Name == vm.Name && vol.ConfigMap != nil && vol.ConfigMap.Name == cm.Name {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Fatalf("%s: the ConfigMap %s is not mounted", where, cm.Name)
	}
	fromSecret := map[string]bool{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			if e.ValueFrom.SecretKeyRef.Name != "fencepub-credentials" {
				t.Fatalf("%s: env %s from Secret %q, want fencepub-credentials", where, e.Name, e.ValueFrom.SecretKeyRef.Name)
			}
			fromSecret[e.Name] = true
		}
	}
	for _, k := range []string{"FENCEPUB_S3_ACCESS_KEY", "FENCEPUB_S3_SECRET_KEY"} {
		if !fromSecret[k] {
			t.Fatalf("%s: %s does not come from the Secret", where, k)
		}
	}
	return c
}

// deploy/kubernetes/gc-daemon.yaml decodes strictly into its k8s.io/api
// types: a ConfigMap and a Deployment of 2 replicas, with liveness on
// /healthz and readiness on /readyz (operator.Daemon.Handler) on container port
// 9464, and a Service (port 9464 to the same container port) and a
// PodDisruptionBudget (1 of the 2 available) selecting its pods.
func TestKubernetesGCDaemon(t *testing.T) {
	m := decodeManifests(t, "gc-daemon.yaml", kubernetesFile(t, "gc-daemon.yaml"))
	if len(m.configMaps) != 1 || len(m.deployments) != 1 || len(m.services) != 1 || len(m.pdbs) != 1 || len(m.cronJobs) != 0 {
		t.Fatalf("gc-daemon.yaml: want one ConfigMap, Deployment, Service and PodDisruptionBudget; got %d %d %d %d %d",
			len(m.configMaps), len(m.deployments), len(m.services), len(m.pdbs), len(m.cronJobs))
	}
	cm, d, svc, pdb := m.configMaps[0], m.deployments[0], m.services[0], m.pdbs[0]
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Fatalf("Deployment replicas %v, want 2", d.Spec.Replicas)
	}
	pod := d.Spec.Template
	selects(t, "Deployment", d.Spec.Selector, pod.Labels)
	selects(t, "PodDisruptionBudget", pdb.Spec.Selector, pod.Labels)
	selects(t, "Service", &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, pod.Labels)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Fatalf("PodDisruptionBudget minAvailable %v, want 1 of the 2 replicas", pdb.Spec.MinAvailable)
	}

	c := checkPod(t, "gc container", pod.Spec, cm)
	// port fails unless p (a port's name or number) is container port num.
	port := func(what string, p string, num int32) {
		t.Helper()
		for _, cp := range c.Ports {
			if (cp.Name == p || strconv.Itoa(int(cp.ContainerPort)) == p) && cp.ContainerPort == num {
				return
			}
		}
		t.Fatalf("%s: port %q is not container port %d", what, p, num)
	}
	for what, probe := range map[string]struct {
		p    *corev1.Probe
		path string
	}{"liveness": {c.LivenessProbe, "/healthz"}, "readiness": {c.ReadinessProbe, "/readyz"}} {
		if probe.p == nil || probe.p.HTTPGet == nil || probe.p.HTTPGet.Path != probe.path {
			t.Fatalf("%s probe %+v, want GET %s", what, probe.p, probe.path)
		}
		port(what+" probe", probe.p.HTTPGet.Port.String(), 9464)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9464 {
		t.Fatalf("Service ports %+v, want 9464", svc.Spec.Ports)
	}
	port("Service targetPort", svc.Spec.Ports[0].TargetPort.String(), 9464)
}

// deploy/kubernetes/run-cronjob.yaml decodes strictly: one CronJob whose
// concurrencyPolicy is set and discussed in a comment, whose pods are never
// restarted in place (a retry is a new pod of the same Job), whose
// podFailurePolicy names its container, with FENCEPUB_RUN_ID from the Job's
// name (downward API), a termination grace period, and the ConfigMap and
// Secret of gc-daemon.yaml.
func TestKubernetesRunCronJob(t *testing.T) {
	b := kubernetesFile(t, "run-cronjob.yaml")
	m := decodeManifests(t, "run-cronjob.yaml", b)
	if len(m.cronJobs) != 1 || len(m.configMaps)+len(m.deployments)+len(m.services)+len(m.pdbs) != 0 {
		t.Fatal("run-cronjob.yaml: want exactly one CronJob")
	}
	cj := m.cronJobs[0]
	if cj.Spec.ConcurrencyPolicy == "" || !regexp.MustCompile(`(?m)^\s*# concurrencyPolicy: `+string(cj.Spec.ConcurrencyPolicy)).Match(b) {
		t.Fatalf("concurrencyPolicy %q: set it and discuss it in a comment", cj.Spec.ConcurrencyPolicy)
	}
	js := cj.Spec.JobTemplate.Spec
	pod := js.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Fatalf("restartPolicy %q: a retry must be a new pod of the same Job", pod.RestartPolicy)
	}
	cm := decodeManifests(t, "gc-daemon.yaml", kubernetesFile(t, "gc-daemon.yaml")).configMaps[0]
	c := checkPod(t, "run container", pod, cm)
	if rp := js.PodFailurePolicy; rp != nil {
		for _, r := range rp.Rules {
			if r.OnExitCodes != nil && (r.OnExitCodes.ContainerName == nil || *r.OnExitCodes.ContainerName != c.Name) {
				t.Fatalf("podFailurePolicy names container %v, not %q", r.OnExitCodes.ContainerName, c.Name)
			}
		}
	}
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "FENCEPUB_RUN_ID" })
	if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.FieldRef == nil ||
		c.Env[i].ValueFrom.FieldRef.FieldPath != "metadata.labels['batch.kubernetes.io/job-name']" {
		t.Fatalf("FENCEPUB_RUN_ID must come from the Job name label: %+v", c.Env)
	}
	if pod.TerminationGracePeriodSeconds == nil {
		t.Fatal("terminationGracePeriodSeconds is not set")
	}
}

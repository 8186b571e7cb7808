package deploy

import (
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tenurehq/tenure/runner"
)

// graceMargin is what terminationGracePeriodSeconds must leave beyond the
// longest graceful stop the config allows, for the process's exit and the
// kubelet's own delays.
const graceMargin = 10 * time.Second

// Values the kubelet would give the downward API of pod tenure-0.
const (
	podName      = "tenure-0"
	podIP        = "10.1.2.3"
	podNamespace = "tenure"
)

// TestWiring checks the cross-references of the kit: selectors match the
// pod labels, every named port exists, probes ask /readyz and /healthz on
// the admin port, volumes and secret references name keys the kit's
// ConfigMap and Secret template have, and the security settings hold.
func TestWiring(t *testing.T) {
	k := loadKit(t)
	sts := one(t, "StatefulSets", all[*appsv1.StatefulSet](k))
	pod := sts.Spec.Template
	podLabels := labels.Set(pod.Labels)
	c := one(t, "containers in the StatefulSet", pod.Spec.Containers)
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, name := range []string{"admin", "call"} {
		if ports[name] == 0 {
			t.Errorf("container %s has no port named %s (ports %v)", c.Name, name, ports)
		}
	}

	sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(podLabels) {
		t.Errorf("StatefulSet selector %v does not match the pod labels %v (%v)", sts.Spec.Selector, pod.Labels, err)
	}
	headless := named[*corev1.Service](k, sts.Spec.ServiceName)
	if headless == nil {
		t.Fatalf("no Service %q (the StatefulSet's serviceName) in the kit", sts.Spec.ServiceName)
	}
	if headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service %s (the StatefulSet's serviceName) has clusterIP %q, want None", headless.Name, headless.Spec.ClusterIP)
	}
	for _, s := range all[*corev1.Service](k) {
		if s.Spec.Selector == nil || !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) {
			t.Errorf("Service %s selects %v, not the runner pods %v", s.Name, s.Spec.Selector, pod.Labels)
		}
		// A detached runner is not ready; it must stay scraped and named.
		if !s.Spec.PublishNotReadyAddresses {
			t.Errorf("Service %s does not publish not-ready runners", s.Name)
		}
		for _, p := range s.Spec.Ports {
			if p.TargetPort.Type != intstr.String || ports[p.TargetPort.StrVal] != p.Port {
				t.Errorf("Service %s port %s targets %v: want a container port's name, of the same number", s.Name, p.Name, p.TargetPort.String())
			}
		}
	}
	pdb := one(t, "PodDisruptionBudgets", all[*policyv1.PodDisruptionBudget](k))
	if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || sel.Empty() || !sel.Matches(podLabels) {
		t.Errorf("PodDisruptionBudget selector %v does not match the pod labels (%v)", pdb.Spec.Selector, err)
	}
	if mu := pdb.Spec.MaxUnavailable; mu == nil || mu.String() != "1" {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", mu)
	}

	sm := one(t, "ServiceMonitors", all[*monitoringv1.ServiceMonitor](k))
	smSel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil || smSel.Empty() {
		t.Fatalf("ServiceMonitor selector %v: %v", sm.Spec.Selector, err)
	}
	var scraped []*corev1.Service
	for _, s := range all[*corev1.Service](k) {
		if smSel.Matches(labels.Set(s.Labels)) {
			scraped = append(scraped, s)
		}
	}
	metrics := one(t, "Services the ServiceMonitor selects", scraped)
	for _, ep := range sm.Spec.Endpoints {
		if !slices.ContainsFunc(metrics.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port && p.TargetPort.StrVal == "admin" }) {
			t.Errorf("ServiceMonitor endpoint port %q is not Service %s's port to the admin port", ep.Port, metrics.Name)
		}
		if ep.Path != "/metrics" {
			t.Errorf("ServiceMonitor endpoint path %q, want /metrics", ep.Path)
		}
	}

	for _, p := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{{"readinessProbe", c.ReadinessProbe, "/readyz"}, {"livenessProbe", c.LivenessProbe, "/healthz"}, {"startupProbe", c.StartupProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: want an httpGet probe", p.what)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path || g.Port.StrVal != "admin" {
			t.Errorf("%s asks %s on port %s, want %s on the admin port", p.what, g.Path, g.Port.String(), p.path)
		}
	}

	sc, psc := c.SecurityContext, pod.Spec.SecurityContext
	switch {
	case sc == nil || psc == nil:
		t.Error("want a pod and a container securityContext")
	case !isTrue(sc.RunAsNonRoot) || !isTrue(psc.RunAsNonRoot) || psc.RunAsUser == nil || *psc.RunAsUser == 0:
		t.Error("securityContext: want runAsNonRoot and a non-zero runAsUser")
	case !isTrue(sc.ReadOnlyRootFilesystem) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("securityContext: want readOnlyRootFilesystem and no privilege escalation")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Error("securityContext: want capabilities drop [ALL], add none")
	}
	req, lim := c.Resources.Requests, c.Resources.Limits
	if req.Cpu().IsZero() || req.Memory().IsZero() || lim.Memory().IsZero() {
		t.Errorf("resources: want cpu and memory requests and a memory limit, got requests %v limits %v", req, lim)
	}
	if pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks {
		t.Error("enableServiceLinks: want false (service links are TENURE_* variables that name no key)")
	}
	if img := one(t, "images in the base kustomization", k.kustomizations["."].Images); img.Name != c.Image {
		t.Errorf("kustomization images name %q, the container's image is %q", img.Name, c.Image)
	}
	if sa := one(t, "ServiceAccounts", all[*corev1.ServiceAccount](k)); pod.Spec.ServiceAccountName != sa.Name {
		t.Errorf("pod serviceAccountName %q, the kit's ServiceAccount is %q", pod.Spec.ServiceAccountName, sa.Name)
	}

	// Every volume names a ConfigMap or Secret of the kit, and every key it
	// projects exists there; every secretKeyRef too.
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			cm := named[*corev1.ConfigMap](k, v.ConfigMap.Name)
			if cm == nil {
				t.Errorf("volume %s: no ConfigMap %s in the kit", v.Name, v.ConfigMap.Name)
			}
		case v.Secret != nil:
			s := named[*corev1.Secret](k, v.Secret.SecretName)
			if s == nil {
				t.Errorf("volume %s: no Secret %s in secret.example.yaml", v.Name, v.Secret.SecretName)
				continue
			}
			for _, it := range v.Secret.Items {
				if !slices.Contains(secretKeys(s), it.Key) {
					t.Errorf("volume %s projects key %s, which Secret %s lacks (%v)", v.Name, it.Key, s.Name, secretKeys(s))
				}
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		if s := named[*corev1.Secret](k, ref.Name); s == nil || !slices.Contains(secretKeys(s), ref.Key) {
			t.Errorf("env %s: Secret %s has no key %s in secret.example.yaml", e.Name, ref.Name, ref.Key)
		}
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

// TestConfig loads the ConfigMap's tenure.yaml with runner.Load, strictly,
// in the environment the StatefulSet gives pod tenure-0 (the Secret
// template's values standing for the secrets), and checks what the pod
// depends on: every TENURE_* variable names a config key, the runner id is
// the pod name, the addresses listen on the container ports and advertise
// the pod IP, the files the config names are mounted, and
// terminationGracePeriodSeconds outlasts the longest graceful stop.
func TestConfig(t *testing.T) {
	k := loadKit(t)
	sts := one(t, "StatefulSets", all[*appsv1.StatefulSet](k))
	cfg := podConfig(t, k)
	c := sts.Spec.Template.Spec.Containers[0]

	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, runner.EnvPrefix) {
			if _, ok := runner.EnvKey(e.Name); !ok {
				t.Errorf("env %s names no config key", e.Name)
			}
		}
	}
	if len(cfg.UnknownEnv()) > 0 {
		t.Errorf("runner.Load ignored %v", cfg.UnknownEnv())
	}
	if cfg.RunnerID != podName {
		t.Errorf("runner_id %q, want the pod name %q", cfg.RunnerID, podName)
	}
	ports := map[string]string{}
	for _, p := range c.Ports {
		ports[p.Name] = strconv.Itoa(int(p.ContainerPort))
	}
	for _, a := range []struct{ key, listen, advertise, port string }{
		{"admin_addr", cfg.AdminAddr, cfg.AdvertiseAddr, ports["admin"]},
		{"call.addr", cfg.Call.Addr, cfg.Call.AdvertiseAddr, ports["call"]},
	} {
		host, port, err := net.SplitHostPort(a.listen)
		if err != nil || port != a.port || host != "0.0.0.0" {
			t.Errorf("%s = %s: want every interface on the container port %s", a.key, a.listen, a.port)
		}
		if want := net.JoinHostPort(podIP, a.port); a.advertise != want {
			t.Errorf("%s advertises %s, want the pod IP: %s", a.key, a.advertise, want)
		}
	}

	// Every file the config names is in a mounted volume that has it.
	for _, f := range []struct{ key, path string }{
		{"etcd.ca_file", cfg.Etcd.CAFile}, {"etcd.cert_file", cfg.Etcd.CertFile}, {"etcd.key_file", cfg.Etcd.KeyFile},
		{"admin.token_file", cfg.Admin.TokenFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := mountedKey(k, sts.Spec.Template.Spec, c, f.path); err != "" {
			t.Errorf("%s = %s: %s", f.key, f.path, err)
		}
	}

	// The graceful stop (runner.Run): the drain, then the manager's wait
	// for handlers and the lease revoke, then the host's and the call
	// server's own waits.
	stop := cfg.DrainTimeout.Std() + 3*cfg.Sharding.InterruptTimeout.Std() + cfg.Etcd.RequestTimeout.Std() + time.Second
	grace := time.Duration(*sts.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	if grace < stop+graceMargin {
		t.Errorf("terminationGracePeriodSeconds %s: the stop takes up to %s (drain_timeout %s), want at least %s more", grace, stop, cfg.DrainTimeout, graceMargin)
	}
	t.Logf("grace %s; longest stop %s; drain_timeout %s", grace, stop, cfg.DrainTimeout)
}

// podConfig loads the ConfigMap's tenure.yaml as the runner of pod
// tenure-0 would: from the path its args give, in its environment.
func podConfig(t *testing.T, k *kit) runner.Config {
	t.Helper()
	sts := one(t, "StatefulSets", all[*appsv1.StatefulSet](k))
	spec := sts.Spec.Template.Spec
	c := spec.Containers[0]
	i := slices.Index(c.Args, "--config")
	if len(c.Args) == 0 || c.Args[0] != "run" || i < 0 || i+1 >= len(c.Args) {
		t.Fatalf("container args %v: want run --config FILE", c.Args)
	}
	data, err := mountedKey(k, spec, c, c.Args[i+1])
	if err != "" {
		t.Fatalf("--config %s: %s", c.Args[i+1], err)
	}
	file := filepath.Join(t.TempDir(), "tenure.yaml")
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, lerr := runner.Load(file, podEnv(t, k, c), nil)
	if lerr != nil {
		t.Fatalf("the ConfigMap's config in the pod's environment: %v", lerr)
	}
	return cfg
}

// mountedKey finds the volume mounted over path and returns the content
// of the key path names in it (a ConfigMap's data, a Secret's string
// data), or why there is none.
func mountedKey(k *kit, spec corev1.PodSpec, c corev1.Container, p string) (string, string) {
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok || strings.Contains(rel, "/") {
			continue
		}
		vi := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if vi < 0 {
			return "", "mount " + m.Name + " names no volume"
		}
		v := spec.Volumes[vi]
		switch {
		case v.ConfigMap != nil:
			if cm := named[*corev1.ConfigMap](k, v.ConfigMap.Name); cm != nil {
				if d, ok := cm.Data[rel]; ok {
					return d, ""
				}
			}
			return "", "ConfigMap " + v.ConfigMap.Name + " has no key " + rel
		case v.Secret != nil:
			s := named[*corev1.Secret](k, v.Secret.SecretName)
			if s == nil {
				return "", "no Secret " + v.Secret.SecretName + " in secret.example.yaml"
			}
			key := rel
			if len(v.Secret.Items) > 0 {
				j := slices.IndexFunc(v.Secret.Items, func(it corev1.KeyToPath) bool { return it.Path == rel })
				if j < 0 {
					return "", "volume " + v.Name + " projects no " + rel
				}
				key = v.Secret.Items[j].Key
			}
			if d, ok := s.StringData[key]; ok {
				return d, ""
			}
			return "", "Secret " + s.Name + " has no key " + key
		}
		return "", "volume " + v.Name + " is neither a ConfigMap nor a Secret"
	}
	return "", "no volume is mounted at " + path.Dir(p)
}

// envRef is a $(VAR) reference in an env value.
var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// podEnv returns the container's environment as the kubelet would build it
// for pod tenure-0: the downward API's values, the Secret template's values
// (optional keys it lacks are left out), and $(VAR) references to the
// variables defined before resolved.
func podEnv(t *testing.T, k *kit, c corev1.Container) []string {
	t.Helper()
	var env []string
	defined := map[string]string{}
	for _, e := range c.Env {
		value := envRef.ReplaceAllStringFunc(e.Value, func(ref string) string {
			if v, ok := defined[ref[2:len(ref)-1]]; ok {
				return v
			}
			return ref
		})
		if vf := e.ValueFrom; vf != nil {
			switch {
			case vf.FieldRef != nil:
				value = map[string]string{"metadata.name": podName, "status.podIP": podIP, "metadata.namespace": podNamespace}[vf.FieldRef.FieldPath]
				if value == "" {
					t.Fatalf("env %s: fieldRef %s is not one the test knows", e.Name, vf.FieldRef.FieldPath)
				}
			case vf.SecretKeyRef != nil:
				s := named[*corev1.Secret](k, vf.SecretKeyRef.Name)
				v, ok := "", false
				if s != nil {
					v, ok = s.StringData[vf.SecretKeyRef.Key]
				}
				if !ok {
					if isTrue(vf.SecretKeyRef.Optional) {
						continue
					}
					t.Fatalf("env %s: Secret %s key %s is not in secret.example.yaml", e.Name, vf.SecretKeyRef.Name, vf.SecretKeyRef.Key)
				}
				value = v
			case vf.ResourceFieldRef != nil:
				q := c.Resources.Limits[corev1.ResourceName(strings.TrimPrefix(vf.ResourceFieldRef.Resource, "limits."))]
				value = strconv.FormatInt(q.Value(), 10)
			default:
				t.Fatalf("env %s: a valueFrom the test does not resolve", e.Name)
			}
		}
		defined[e.Name] = value
		env = append(env, e.Name+"="+value)
	}
	return env
}

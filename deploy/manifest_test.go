package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/tenurehq/tenure/internal/testenv"
)

// root is the repository root, absolute: found before testenv starts any
// server, since the shared S3 server changes the working directory.
var root string

// TestMain finds the repository root, then runs the tests with the shared
// servers of internal/testenv.
func TestMain(m *testing.M) {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy:", err)
		os.Exit(1)
	}
	root = filepath.Dir(wd)
	testenv.Main(m)
}

// kustomization is the part of a kustomize.config.k8s.io/v1beta1
// Kustomization the kit uses; decoded strictly, a field the kit writes and
// this type lacks fails.
type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors"`
	} `json:"labels"`
	Resources []string `json:"resources"`
	Images    []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

// object is one decoded manifest document.
type object struct {
	file string // relative to deploy/kubernetes
	obj  any    // a pointer to the API type of its kind
	meta metav1.ObjectMeta
}

// kit is every manifest of deploy/kubernetes.
type kit struct {
	objects        []object
	kustomizations map[string]*kustomization // by directory, relative
}

// all returns the kit's objects of type T, in file order.
func all[T any](k *kit) []T {
	var out []T
	for _, o := range k.objects {
		if x, ok := o.obj.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

// docSeparator splits a multi-document YAML file.
var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// loadKit decodes every YAML file under deploy/kubernetes strictly.
func loadKit(t *testing.T) *kit {
	t.Helper()
	dir := filepath.Join(root, "deploy", "kubernetes")
	k := &kit{kustomizations: map[string]*kustomization{}}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, doc := range docSeparator.Split(string(b), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			if err := k.add(filepath.ToSlash(rel), []byte(doc)); err != nil {
				return fmt.Errorf("%s (document %d): %w", rel, i+1, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(k.objects) < 10 {
		t.Fatalf("decoded %d manifests under %s: want the whole kit", len(k.objects), dir)
	}
	return k
}

func stripComments(doc string) string {
	var out []string
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// add decodes one document by its apiVersion and kind, refusing unknown
// fields.
func (k *kit) add(file string, doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	obj, err := decodeStrict(tm, doc)
	if err != nil {
		return err
	}
	if kz, ok := obj.(*kustomization); ok {
		k.kustomizations[filepath.ToSlash(filepath.Dir(file))] = kz
		return nil
	}
	var om struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := yaml.Unmarshal(doc, &om); err != nil {
		return err
	}
	k.objects = append(k.objects, object{file: file, obj: obj, meta: om.Metadata})
	return nil
}

// kinds are the kinds of the kit, by "apiVersion kind", with their types.
var kinds = map[string]func() any{
	"kustomize.config.k8s.io/v1beta1 Kustomization": func() any { return &kustomization{} },
	"apps/v1 StatefulSet":                           func() any { return &appsv1.StatefulSet{} },
	"v1 Service":                                    func() any { return &corev1.Service{} },
	"v1 ConfigMap":                                  func() any { return &corev1.ConfigMap{} },
	"v1 Secret":                                     func() any { return &corev1.Secret{} },
	"v1 ServiceAccount":                             func() any { return &corev1.ServiceAccount{} },
	"policy/v1 PodDisruptionBudget":                 func() any { return &policyv1.PodDisruptionBudget{} },
	"monitoring.coreos.com/v1 ServiceMonitor":       func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1 PrometheusRule":       func() any { return &monitoringv1.PrometheusRule{} },
}

// decodeStrict decodes doc into the API type of tm; unknown fields and
// duplicate keys are errors, and so is a kind the kit does not expect.
func decodeStrict(tm metav1.TypeMeta, doc []byte) (any, error) {
	newObj, ok := kinds[tm.APIVersion+" "+tm.Kind]
	if !ok {
		return nil, fmt.Errorf("apiVersion %q kind %q: not a kind of the kit", tm.APIVersion, tm.Kind)
	}
	obj := newObj()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s %s: %w", tm.APIVersion, tm.Kind, err)
	}
	return obj, nil
}

// one returns the only element of xs, failing the test otherwise.
func one[T any](t *testing.T, what string, xs []T) T {
	t.Helper()
	if len(xs) != 1 {
		t.Fatalf("the kit has %d %s, want 1", len(xs), what)
	}
	return xs[0]
}

// named returns the kit's object of type T with that name, or the zero T
// (nil) when there is none.
func named[T interface{ GetName() string }](k *kit, name string) T {
	for _, o := range all[T](k) {
		if o.GetName() == name {
			return o
		}
	}
	var zero T
	return zero
}

// secretKeys lists a Secret's keys, from data and stringData.
func secretKeys(s *corev1.Secret) []string {
	var keys []string
	for k := range s.Data {
		keys = append(keys, k)
	}
	for k := range s.StringData {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestManifestsDecodeStrictly: every manifest decodes strictly into its
// Kubernetes or prometheus-operator API type (loadKit), none names a
// namespace, each kustomization lists exactly its directory's manifests
// (the Secret template aside), and the decoder does refuse a misspelt
// field.
func TestManifestsDecodeStrictly(t *testing.T) {
	k := loadKit(t)
	for _, o := range k.objects {
		if o.meta.Namespace != "" {
			t.Errorf("%s: %s names namespace %q: the kit is applied with -n", o.file, o.meta.Name, o.meta.Namespace)
		}
		if o.meta.Name == "" {
			t.Errorf("%s: a %T without a name", o.file, o.obj)
		}
	}
	dir := filepath.Join(root, "deploy", "kubernetes")
	if len(k.kustomizations) != 2 {
		t.Errorf("kustomizations in %v, want the base and monitoring/", mapsKeys(k.kustomizations))
	}
	for d, kz := range k.kustomizations {
		entries, err := os.ReadDir(filepath.Join(dir, d))
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, e := range entries {
			n := e.Name()
			if strings.HasSuffix(n, ".yaml") && n != "kustomization.yaml" && n != "secret.example.yaml" {
				want = append(want, n)
			}
		}
		got := slices.Sorted(slices.Values(kz.Resources))
		if !slices.Equal(got, want) {
			t.Errorf("%s/kustomization.yaml lists %v; the directory has %v", d, got, want)
		}
	}

	sts, err := os.ReadFile(filepath.Join(dir, "statefulset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	misspelt := bytes.Replace(sts, []byte("  replicas:"), []byte("  replicaz:"), 1)
	if bytes.Equal(misspelt, sts) {
		t.Fatal("statefulset.yaml has no replicas field to misspell")
	}
	if _, err := decodeStrict(metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"}, misspelt); err == nil || !strings.Contains(err.Error(), "replicaz") {
		t.Errorf("a StatefulSet with spec.replicaz decoded (err %v): the decoder is not strict", err)
	}
}

func mapsKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

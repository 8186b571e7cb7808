package deploy

import (
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
)

// deprecatedMetrics are names the runners still export for one release
// under an old name: the rules use their successors.
var deprecatedMetrics = map[string]string{"tenure_tasks_total": "tenure_tasks_attempts_total"}

// requiredAlerts are the alerts the kit must carry (docs/operations.md,
// alerts).
var requiredAlerts = []string{
	"TenureRunnerDetached", "TenureUnownedShards", "TenureLeaseDeadlineLag",
	"TenureKeepAlivesFailing", "TenureKeepAliveFailures", "TenureTasksDeadLettered",
}

var (
	metricRef = regexp.MustCompile(`\btenure_[a-z0-9_]+`)
	// The first cell of a row of the metrics table: | `name{labels}`, ... |
	metricRow = regexp.MustCompile("^\\| `tenure_")
	jobRef    = regexp.MustCompile(`job="([^"]+)"`)
	// unownedExpr and lagExpr hold the numbers the config decides.
	unownedExpr = regexp.MustCompile(`\(tenure_sharding_owned_shards[^)]*\)\s*<\s*([0-9]+)$`)
	lagExpr     = regexp.MustCompile(`tenure_sharding_lease_deadline_lag_seconds[^<]*<\s*([0-9.]+)$`)
)

// documentedMetrics returns the metric names of docs/operations.md's
// metrics table.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if !metricRow.MatchString(l) {
			continue
		}
		cell := strings.SplitN(l, "|", 3)[1]
		for _, n := range metricRef.FindAllString(cell, -1) {
			names[n] = true
		}
	}
	if len(names) < 30 {
		t.Fatalf("found %d metric names in docs/operations.md's table: is the parser still finding them?", len(names))
	}
	return names
}

// known reports whether a series name is a documented metric: the name
// itself, or a histogram's _bucket, _sum or _count.
func known(doc map[string]bool, name string) bool {
	if doc[name] {
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok && doc[base] {
			return true
		}
	}
	return false
}

// TestPrometheusRule: the required alerts are there; every metric
// their expressions name is documented (docs/operations.md, which the docs
// test holds to the code); the numbers that follow the config match the
// ConfigMap's; the job they name is the scraped Service; every `for`
// parses.
func TestPrometheusRule(t *testing.T) {
	k := loadKit(t)
	pr := one(t, "PrometheusRules", all[*monitoringv1.PrometheusRule](k))
	cfg := podConfig(t, k)
	doc := documentedMetrics(t)
	metricsSvc := one(t, "ServiceMonitors", all[*monitoringv1.ServiceMonitor](k)).Spec.Selector.MatchLabels
	var svc string
	for _, s := range all[*corev1.Service](k) {
		if s.Labels["app.kubernetes.io/component"] == metricsSvc["app.kubernetes.io/component"] {
			svc = s.Name
		}
	}

	alerts := map[string]monitoringv1.Rule{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule without alert (recording rules are not expected)", g.Name)
				continue
			}
			if _, dup := alerts[r.Alert]; dup {
				t.Errorf("alert %s defined twice", r.Alert)
			}
			alerts[r.Alert] = r
			expr := r.Expr.String()
			for _, m := range metricRef.FindAllString(expr, -1) {
				switch {
				case deprecatedMetrics[m] != "":
					t.Errorf("alert %s: %s is deprecated, use %s", r.Alert, m, deprecatedMetrics[m])
				case known(doc, m):
				default:
					t.Errorf("alert %s: %s is not a metric docs/operations.md lists", r.Alert, m)
				}
			}
			for _, j := range jobRef.FindAllStringSubmatch(expr, -1) {
				if j[1] != svc {
					t.Errorf("alert %s: job=%q, but the ServiceMonitor scrapes Service %q", r.Alert, j[1], svc)
				}
			}
			if r.For != nil {
				if _, err := time.ParseDuration(string(*r.For)); err != nil {
					t.Errorf("alert %s: for %q: %v", r.Alert, *r.For, err)
				}
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("alert %s: want a severity label and a summary", r.Alert)
			}
		}
	}
	for _, a := range requiredAlerts {
		if _, ok := alerts[a]; !ok {
			t.Errorf("no alert %s", a)
		}
	}

	shards := cfg.Shards * len(cfg.ShardGroups)
	if m := unownedExpr.FindStringSubmatch(exprOf(alerts["TenureUnownedShards"])); m == nil || m[1] != strconv.Itoa(shards) {
		t.Errorf("TenureUnownedShards compares with %v; the config has %d shards × %d groups = %d", m, cfg.Shards, len(cfg.ShardGroups), shards)
	}
	// A healthy runner's deadline stays at least ttl − interval − timeout
	// ahead.
	lag := cfg.Lease.TTL.Std() - cfg.Lease.KeepAliveInterval.Std() - cfg.Lease.KeepAliveTimeout.Std()
	m := lagExpr.FindStringSubmatch(exprOf(alerts["TenureLeaseDeadlineLag"]))
	if m == nil {
		t.Fatalf("TenureLeaseDeadlineLag: no threshold in %s", exprOf(alerts["TenureLeaseDeadlineLag"]))
	}
	// The derived keys are a third and a sixth of the TTL: to the 0.1s.
	if got, err := strconv.ParseFloat(m[1], 64); err != nil || math.Abs(got-lag.Seconds()) > 0.05 {
		t.Errorf("TenureLeaseDeadlineLag threshold %s; lease.ttl − keepalive_interval − keepalive_timeout is %s", m[1], lag)
	}
}

// exprOf returns a rule's expression.
func exprOf(r monitoringv1.Rule) string { return r.Expr.String() }

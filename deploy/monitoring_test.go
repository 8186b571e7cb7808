package deploy

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
)

// deprecatedMetrics are names the runners still export for one release
// under an old name: the rules use their successors.
var deprecatedMetrics = map[string]string{"tenure_tasks_total": "tenure_tasks_attempts_total"}

// runbookBase is where the alerts' runbook_url point: the runbooks of
// docs/operations.md, on GitHub.
const runbookBase = "https://github.com/tenurehq/tenure/blob/main/docs/operations.md#"

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

// alertDoc is one row of docs/operations.md's table of alerts.
type alertDoc struct {
	line       int
	severity   string
	expr, hold string // hold: the `for` column
}

var (
	// The header of the alerts table, and its first cell's alert name.
	alertHeader = regexp.MustCompile(`^\|\s*alert\s*\|\s*severity\s*\|\s*expression\s*\|\s*for\s*\|\s*meaning\s*\|\s*$`)
	alertName   = regexp.MustCompile("^\\[?`(Tenure[A-Za-z0-9]+)`")
	// cellSep is a table's column separator: a '|' that `\|` does not
	// escape.
	cellSep = regexp.MustCompile(`(^|[^\\])\|`)
	heading = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	fence   = regexp.MustCompile("^ {0,3}(```|~~~)")
	mdLink  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// operationsDoc returns docs/operations.md's lines.
func operationsDoc(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(b), "\n")
}

// cells splits a table row into its trimmed cells, `\|` unescaped.
func cells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimPrefix(strings.TrimSuffix(row, "|"), "|")
	row = cellSep.ReplaceAllString(row, "$1\x00")
	var out []string
	for _, c := range strings.Split(row, "\x00") {
		out = append(out, strings.TrimSpace(strings.ReplaceAll(c, `\|`, "|")))
	}
	return out
}

// recommendedAlerts returns the alerts of docs/operations.md's table
// (alert, severity, expression, for, meaning), by name.
func recommendedAlerts(t *testing.T, lines []string) map[string]alertDoc {
	t.Helper()
	alerts := map[string]alertDoc{}
	in := false
	for i, l := range lines {
		switch {
		case alertHeader.MatchString(l):
			if in || len(alerts) > 0 {
				t.Fatalf("docs/operations.md:%d: a second table of alerts", i+1)
			}
			in = true
			continue
		case !in:
			continue
		case !strings.HasPrefix(l, "|"):
			in = false
			continue
		case strings.HasPrefix(l, "|---"):
			continue
		}
		c := cells(l)
		m := alertName.FindStringSubmatch(c[0])
		if len(c) != 5 || m == nil {
			t.Errorf("docs/operations.md:%d: want | `TenureName` | severity | expression | for | meaning |, got %q", i+1, l)
			continue
		}
		if _, dup := alerts[m[1]]; dup {
			t.Errorf("docs/operations.md:%d: alert %s listed twice", i+1, m[1])
		}
		alerts[m[1]] = alertDoc{line: i + 1, severity: c[1], expr: strings.Trim(c[2], "`"), hold: c[3]}
	}
	if len(alerts) < 20 {
		t.Fatalf("found %d alerts in docs/operations.md's table: is the parser still finding them?", len(alerts))
	}
	return alerts
}

// anchors returns the heading anchors GitHub gives a Markdown document:
// the heading's text (a link's text kept), lower case, every character but
// letters, digits, '-', '_' and spaces dropped, spaces made '-'; a
// repeated one gets "-1", "-2", …. Lines in fenced code are no headings.
func anchors(lines []string) map[string]bool {
	out := map[string]bool{}
	inFence := false
	for _, l := range lines {
		if fence.MatchString(l) {
			inFence = !inFence
			continue
		}
		m := heading.FindStringSubmatch(l)
		if inFence || m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(mdLink.ReplaceAllString(m[1], "$1")) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		for i := 1; out[a]; i++ {
			a = fmt.Sprintf("%s-%d", b.String(), i)
		}
		out[a] = true
	}
	return out
}

// metricSet returns the tenure_ metric names an expression names.
func metricSet(expr string) []string {
	ms := metricRef.FindAllString(expr, -1)
	slices.Sort(ms)
	return slices.Compact(ms)
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

// TestPrometheusRule: the rule carries exactly the alerts of
// docs/operations.md's table, each with its severity and `for`, and an
// expression naming the same metrics; every metric an expression names is
// documented (docs/operations.md's metrics table, which the docs test holds
// to the code: deploy's module does not build the runners' registries);
// every alert has a summary, a description and a runbook_url into
// docs/operations.md whose anchor the document has; the numbers that follow
// the config match the ConfigMap's; the job they name is the scraped
// Service; every `for` parses.
func TestPrometheusRule(t *testing.T) {
	k := loadKit(t)
	pr := one(t, "PrometheusRules", all[*monitoringv1.PrometheusRule](k))
	cfg := podConfig(t, k)
	doc := documentedMetrics(t)
	lines := operationsDoc(t)
	recommended := recommendedAlerts(t, lines)
	docAnchors := anchors(lines)
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
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: want a severity label, a summary and a description", r.Alert)
			}
			switch anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookBase); {
			case !ok:
				t.Errorf("alert %s: runbook_url %q: want %s<anchor>", r.Alert, r.Annotations["runbook_url"], runbookBase)
			case !docAnchors[anchor]:
				t.Errorf("alert %s: runbook_url %q: docs/operations.md has no heading with anchor #%s", r.Alert, r.Annotations["runbook_url"], anchor)
			}
			d, ok := recommended[r.Alert]
			if !ok {
				t.Errorf("alert %s: not in docs/operations.md's table of alerts", r.Alert)
				continue
			}
			var forDoc string
			if r.For != nil {
				forDoc = string(*r.For)
			}
			if d.hold != "–" && d.hold != forDoc || d.hold == "–" && forDoc != "" {
				t.Errorf("alert %s: for %q; docs/operations.md:%d says %q", r.Alert, forDoc, d.line, d.hold)
			}
			if d.severity != r.Labels["severity"] {
				t.Errorf("alert %s: severity %q; docs/operations.md:%d says %q", r.Alert, r.Labels["severity"], d.line, d.severity)
			}
			if got, want := metricSet(expr), metricSet(d.expr); !slices.Equal(got, want) {
				t.Errorf("alert %s: expression names %v; docs/operations.md:%d's names %v", r.Alert, got, d.line, want)
			}
		}
	}
	var missing []string
	for a := range recommended {
		if _, ok := alerts[a]; !ok {
			missing = append(missing, a)
		}
	}
	slices.Sort(missing)
	for _, a := range missing {
		t.Errorf("docs/operations.md:%d recommends %s; the PrometheusRule has no such alert", recommended[a].line, a)
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

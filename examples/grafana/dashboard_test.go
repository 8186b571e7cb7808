package grafana

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// knownMetrics are the metric families the code registers, with their
// types: the families of sharding/metrics.go, entity/metrics.go,
// entity/singleton.go, entity/reminder.go, entity/schedule/metrics.go,
// messaging/metrics.go, storage/s3/metrics.go and runner/dynamic.go.
// TestKnownMetricsExist holds the list to the code both ways (every name
// registered, every registered tenure_ name listed, the types right), and
// TestDashboardQueriesKnownMetrics requires a panel for each of them but
// the deprecated ones.
var knownMetrics = map[string]string{
	"tenure_sharding_detached":                             "gauge",
	"tenure_sharding_detachments_total":                    "counter",
	"tenure_sharding_attachments_total":                    "counter",
	"tenure_sharding_would_detach_total":                   "counter",
	"tenure_sharding_lease_keepalive_failures_total":       "counter",
	"tenure_sharding_lease_keepalive_failure_streak":       "gauge",
	"tenure_sharding_lease_lost_total":                     "counter",
	"tenure_sharding_lease_deadline_lag_seconds":           "gauge",
	"tenure_sharding_acquire_retry_attempts_total":         "counter",
	"tenure_sharding_acquire_retry_window_exhausted_total": "counter",
	"tenure_sharding_owned_shards":                         "gauge",
	"tenure_sharding_assigned_shards":                      "gauge",
	"tenure_sharding_locks_lost_total":                     "counter",
	"tenure_sharding_stray_locks_released_total":           "counter",
	"tenure_sharding_storage_errors_total":                 "counter",
	"tenure_sharding_handoff_duration_seconds":             "histogram",
	"tenure_sharding_rebalance_duration_seconds":           "histogram",
	"tenure_sharding_lease_keepalive_duration_seconds":     "histogram",

	"tenure_tasks_attempts_total":           "counter",
	"tenure_tasks_total":                    "counter",
	"tenure_tasks_duration_seconds":         "histogram",
	"tenure_tasks_start_latency_seconds":    "histogram",
	"tenure_tasks_claims_total":             "counter",
	"tenure_tasks_claim_conflicts_total":    "counter",
	"tenure_tasks_takeovers_total":          "counter",
	"tenure_tasks_unhandled_total":          "counter",
	"tenure_tasks_corrupt_total":            "counter",
	"tenure_tasks_stale_pointers_total":     "counter",
	"tenure_tasks_running":                  "gauge",
	"tenure_tasks_queued":                   "gauge",
	"tenure_tasks_reconciles_total":         "counter",
	"tenure_tasks_reconcile_found_total":    "counter",
	"tenure_tasks_wakeups_total":            "counter",
	"tenure_tasks_interrupt_overruns_total": "counter",
	"tenure_tasks_purged_total":             "counter",
	"tenure_tasks_sweeps_total":             "counter",
	"tenure_entity_resident":                "gauge",
	"tenure_entity_passivations_total":      "counter",

	"tenure_calls_total":                     "counter",
	"tenure_call_reroutes_total":             "counter",
	"tenure_call_duration_seconds":           "histogram",
	"tenure_call_server_requests_total":      "counter",
	"tenure_entity_messages_total":           "counter",
	"tenure_entity_message_duration_seconds": "histogram",

	"tenure_entity_state_loads_total":           "counter",
	"tenure_entity_state_saves_total":           "counter",
	"tenure_entity_state_refences_total":        "counter",
	"tenure_entity_state_bytes":                 "histogram",
	"tenure_entity_state_load_duration_seconds": "histogram",
	"tenure_entity_state_save_duration_seconds": "histogram",

	"tenure_singleton_running":         "gauge",
	"tenure_singleton_restarts_total":  "counter",
	"tenure_entity_reminders_total":    "counter",
	"tenure_schedule_fires_total":      "counter",
	"tenure_schedule_fire_lag_seconds": "histogram",

	"tenure_s3_requests_total":           "counter",
	"tenure_s3_request_duration_seconds": "histogram",

	"tenure_runner_config_version": "gauge",
	"tenure_runner_config_canary":  "gauge",
	"tenure_runner_info":           "gauge",
}

// deprecated are names the code still registers for one release under an
// old name; the dashboard queries their successors.
var deprecated = map[string]string{
	"tenure_tasks_total": "tenure_tasks_attempts_total",
}

// dashboard is the part of the Grafana model the tests read.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource *datasource              `json:"datasource"`
	GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
	Targets    []struct {
		Expr       string      `json:"expr"`
		RefID      string      `json:"refId"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

// dashboardPath is resolved when the test binary starts: the embedded S3
// server that TestKnownMetricsExist starts changes the working directory.
var dashboardPath, dashboardPathErr = filepath.Abs("tenure-dashboard.json")

func load(t *testing.T) dashboard {
	t.Helper()
	if dashboardPathErr != nil {
		t.Fatal(dashboardPathErr)
	}
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("tenure-dashboard.json: %v", err)
	}
	if dec.More() {
		t.Fatal("tenure-dashboard.json: data after the dashboard object")
	}
	return d
}

// allPanels flattens rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

var metricName = regexp.MustCompile(`\btenure_[a-z0-9_]+`)

// family maps a series name to its metric family: a histogram's _bucket,
// _sum and _count series belong to it.
func family(name string) (string, bool) {
	if typ, ok := knownMetrics[name]; ok {
		return name, typ != "histogram"
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, found := strings.CutSuffix(name, suffix)
		if found && knownMetrics[base] == "histogram" {
			return base, true
		}
	}
	return "", false
}

// TestDashboardQueriesKnownMetrics: the dashboard parses as Grafana's
// model; every query names only known metric series (a histogram through
// its _bucket, _sum or _count series), uses the ${DS_PROMETHEUS} data
// source, has balanced brackets and quotes, and takes the rate of a
// counter or histogram series and of no gauge; panels have unique ids,
// titles and positions inside the 24-column grid; and every known metric
// family but the deprecated ones has a panel that queries it.
func TestDashboardQueriesKnownMetrics(t *testing.T) {
	d := load(t)
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 36 {
		t.Errorf("title %q uid %q schemaVersion %d: want a title, a uid and schemaVersion ≥ 36", d.Title, d.UID, d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${DS_PROMETHEUS}") {
			t.Errorf("variable %s: data source %+v, want ${DS_PROMETHEUS}", v.Name, v.Datasource)
		}
	}
	if vars["DS_PROMETHEUS"] != "datasource" || vars["runner"] != "query" {
		t.Errorf("template variables %v: want DS_PROMETHEUS (datasource) and runner (query)", vars)
	}
	used := map[string]bool{}
	ids := map[int]string{}
	for _, p := range allPanels(d.Panels) {
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		if prev, dup := ids[p.ID]; dup || p.ID <= 0 {
			t.Errorf("panel %q: id %d (also %q): want unique positive ids", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		if g := p.GridPos; g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${DS_PROMETHEUS}" {
			t.Errorf("panel %q: data source %+v, want ${DS_PROMETHEUS}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			where := fmt.Sprintf("panel %q query %s", p.Title, tg.RefID)
			if err := balanced(tg.Expr); err != nil {
				t.Errorf("%s: %v in %s", where, err, tg.Expr)
			}
			locs := metricName.FindAllStringIndex(tg.Expr, -1)
			if len(locs) == 0 {
				t.Errorf("%s names no tenure metric: %s", where, tg.Expr)
			}
			for _, loc := range locs {
				n := tg.Expr[loc[0]:loc[1]]
				fam, ok := family(n)
				if !ok {
					t.Errorf("%s: %s is not a known metric series (see knownMetrics)", where, n)
					continue
				}
				if next, old := deprecated[fam]; old {
					t.Errorf("%s: %s is deprecated, query %s", where, fam, next)
				}
				if knownMetrics[fam] == "histogram" && n == fam {
					t.Errorf("%s: histogram %s queried without _bucket, _sum or _count", where, n)
				}
				// A counter's value, or a histogram series', is a running
				// total: only its rate says anything. A gauge's rate is a
				// mistake.
				rated := rateCall.MatchString(tg.Expr[:loc[0]])
				if cumulative := knownMetrics[fam] != "gauge"; cumulative && !rated {
					t.Errorf("%s: %s is a %s: query its rate() or increase()", where, n, knownMetrics[fam])
				} else if !cumulative && rated {
					t.Errorf("%s: %s is a gauge: its rate() means nothing", where, n)
				}
				used[fam] = true
			}
		}
	}
	var missing []string
	for n := range knownMetrics {
		if _, old := deprecated[n]; !old && !used[n] {
			missing = append(missing, n)
		}
	}
	slices.Sort(missing)
	for _, n := range missing {
		t.Errorf("no panel queries %s", n)
	}
}

// rateCall matches the text before a series name that is the argument of
// rate(), irate() or increase().
var rateCall = regexp.MustCompile(`\b(?:rate|irate|increase)\(\s*$`)

// queried returns the metric families the dashboard's queries name.
func queried(d dashboard) map[string]bool {
	fams := map[string]bool{}
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			for _, n := range metricName.FindAllString(tg.Expr, -1) {
				if fam, ok := family(n); ok {
					fams[fam] = true
				}
			}
		}
	}
	return fams
}

// balanced checks brackets and double quotes, the mistakes a hand-edited
// query makes most.
func balanced(expr string) error {
	var stack []rune
	pairs := map[rune]rune{')': '(', '}': '{', ']': '['}
	inQuote := false
	for i, r := range expr {
		switch {
		case r == '"':
			inQuote = !inQuote
		case inQuote:
		case r == '(' || r == '{' || r == '[':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return fmt.Errorf("unbalanced %q at byte %d", r, i)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if inQuote {
		return fmt.Errorf("unterminated string")
	}
	if len(stack) > 0 {
		return fmt.Errorf("unclosed %q", slices.Clone(stack))
	}
	return nil
}

// TestBalanced: the bracket check catches what it is for.
func TestBalanced(t *testing.T) {
	for expr, ok := range map[string]bool{
		`sum by (a) (rate(x{l="("}[5m]))`: true,
		`sum(rate(x[5m])`:                 false,
		`x{l="a}`:                         false,
		`x)`:                              false,
		`sum(x[5m)]`:                      false,
	} {
		if err := balanced(expr); (err == nil) != ok {
			t.Errorf("balanced(%s) = %v, want ok=%v", expr, err, ok)
		}
	}
}

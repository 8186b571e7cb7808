package grafana

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/runnermetrics"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/sharding"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
	"github.com/tenurehq/tenure/storage/memstore"
	s3store "github.com/tenurehq/tenure/storage/s3"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// recorder is a prometheus.Registerer that keeps what is registered with
// it: unlike a registry's Gather, it sees every family, labelled ones that
// have no series yet included.
type recorder struct {
	names      map[string]string // name → type, "" until kinds is called
	collectors []prometheus.Collector
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = ""
		}
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		r.Register(c)
	}
}

func (r *recorder) Unregister(prometheus.Collector) bool { return true }

// kinds records the type of every recorded family: a vector's from its Go
// type (an empty one exports nothing), any other collector's from what a
// private registry gathers from it. It runs once the parts are built,
// since gathering calls a GaugeFunc's function.
func (r *recorder) kinds(t *testing.T) {
	t.Helper()
	reg := prometheus.NewRegistry()
	for _, c := range r.collectors {
		switch c.(type) {
		case *prometheus.CounterVec, *prometheus.GaugeVec, *prometheus.HistogramVec:
		default:
			if err := reg.Register(c); err != nil {
				t.Fatal(err)
			}
			continue
		}
		ch := make(chan *prometheus.Desc, 1)
		c.Describe(ch)
		name := fqName.FindStringSubmatch((<-ch).String())[1]
		switch c.(type) {
		case *prometheus.CounterVec:
			r.names[name] = "counter"
		case *prometheus.GaugeVec:
			r.names[name] = "gauge"
		case *prometheus.HistogramVec:
			r.names[name] = "histogram"
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		r.names[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
}

// TestKnownMetricsExist holds knownMetrics to the code, both ways, and
// the dashboard to every family: the families are those registered by the
// entity host, the sharding manager and the S3 metrics observer through
// their registry options, and by a real runner (its own series, the call
// client and server's, the schedules') through its registry. Every name
// in knownMetrics is registered, with its type where the test can tell it
// (a histogram or not for the runner's); every registered tenure_ family
// is in knownMetrics; and every one but the deprecated has a panel that
// queries it. A new metric fails this test until the dashboard shows it.
func TestKnownMetricsExist(t *testing.T) {
	rec := &recorder{names: map[string]string{}}
	srv := testenv.SharedEtcd(t)
	rs, err := etcd.New(srv.Client(t), etcd.WithPrefix(testenv.Prefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	host, err := entity.NewHost(task.NewStore(memstore.New()), rs, "metrics", entity.DefaultConfig(), entity.WithRegistry(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		host.Close(ctx)
	}()
	if _, err := sharding.New(rs, storage.RunnerInfo{ID: "metrics", Weight: 1},
		storage.ClusterMeta{Shards: 1, Groups: []string{storage.DefaultGroup}, Hash: placement.HashName}, sharding.DefaultConfig(),
		sharding.WithRegistry(rec)); err != nil {
		t.Fatal(err)
	}
	s3store.MetricsObserver(rec)
	rec.kinds(t)

	// The runner's registry adds the families only it registers; it tells
	// a histogram from the rest.
	hist := map[string]bool{}
	for name, isHist := range runnermetrics.Gather(t) {
		hist[name] = isHist
		if _, ok := rec.names[name]; !ok {
			rec.names[name] = ""
		}
	}
	if len(rec.names) < len(knownMetrics) {
		t.Fatalf("recorded %d metric names: the recorder saw nothing?", len(rec.names))
	}

	for name, typ := range knownMetrics {
		got, ok := rec.names[name]
		switch {
		case !ok:
			t.Errorf("%s: the dashboard queries it but the code registers no such metric", name)
		case got != "" && got != typ:
			t.Errorf("%s: knownMetrics says %s, the code registers a %s", name, typ, got)
		case got == "" && hist[name] != (typ == "histogram"):
			t.Errorf("%s: knownMetrics says %s, the runner's registry says histogram=%v", name, typ, hist[name])
		}
		// Prometheus's naming rule, which the code follows: counters,
		// and only they, end in _total.
		if strings.HasSuffix(name, "_total") != (typ == "counter") {
			t.Errorf("%s: a %s; only counters end in _total", name, typ)
		}
	}
	onDashboard := queried(load(t))
	var unknown, noPanel []string
	for name := range rec.names {
		if !strings.HasPrefix(name, "tenure_") {
			continue
		}
		if _, ok := knownMetrics[name]; !ok {
			unknown = append(unknown, name)
		}
		if _, old := deprecated[name]; !old && !onDashboard[name] {
			noPanel = append(noPanel, name)
		}
	}
	slices.Sort(unknown)
	slices.Sort(noPanel)
	if len(unknown) > 0 {
		t.Errorf("registered by the code but not in knownMetrics (add them, with their types): %v", unknown)
	}
	if len(noPanel) > 0 {
		t.Errorf("registered by the code but no panel of tenure-dashboard.json queries them: %v", noPanel)
	}
}

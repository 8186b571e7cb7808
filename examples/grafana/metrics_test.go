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

// recorder is a prometheus.Registerer that keeps the names of what is
// registered with it: unlike a registry's Gather, it sees every family,
// labelled ones that have no series yet included.
type recorder struct{ names map[string]bool }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		r.Register(c)
	}
}

func (r *recorder) Unregister(prometheus.Collector) bool { return true }

// TestKnownMetricsExist: every name in knownMetrics is registered by the
// code as it is: the entity host, the sharding manager and the S3 metrics
// observer through their registry options, and a real runner (whose own
// series it registers when it starts) through its registry. Metric names
// the code registers that the dashboard does not know are logged, not
// failed: a new metric need not have a panel at once.
func TestKnownMetricsExist(t *testing.T) {
	rec := &recorder{names: map[string]bool{}}
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

	for name := range runnermetrics.Gather(t) {
		rec.names[name] = true
	}

	for name := range knownMetrics {
		if !rec.names[name] {
			t.Errorf("%s: the dashboard queries it but the code registers no such metric", name)
		}
	}
	var unknown []string
	for name := range rec.names {
		if _, ok := knownMetrics[name]; !ok && strings.HasPrefix(name, "tenure_") {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	if len(unknown) > 0 {
		t.Logf("registered but not on the dashboard: %v", unknown)
	}
	if len(rec.names) < len(knownMetrics) {
		t.Fatalf("recorded %d metric names: the recorder saw nothing?", len(rec.names))
	}
}

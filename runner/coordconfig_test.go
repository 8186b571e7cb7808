package runner

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
	"github.com/tenurehq/tenure/storage/s3coord"
)

// TestCoordinationConfig: coordination defaults to etcd, which needs
// etcd.endpoints; coordination: s3 needs no etcd section, from the file,
// the environment or --set alike, and its poll bounds have defaults and
// checks that name the key.
func TestCoordinationConfig(t *testing.T) {
	noEtcd := writeFile(t, "s3:\n  bucket: tasks\n")
	if _, err := Load(noEtcd, nil, nil); err == nil || !strings.Contains(err.Error(), "etcd.endpoints") {
		t.Fatalf("no etcd section, default coordination: %v, want an error naming etcd.endpoints", err)
	}
	for name, load := range map[string]func() (Config, error){
		"file": func() (Config, error) {
			return Load(writeFile(t, "coordination: s3\ns3:\n  bucket: tasks\n"), nil, nil)
		},
		"env": func() (Config, error) { return Load(noEtcd, []string{"TENURE_COORDINATION=s3"}, nil) },
		"set": func() (Config, error) { return Load(noEtcd, nil, []string{"coordination=s3"}) },
	} {
		c, err := load()
		if err != nil {
			t.Errorf("%s: coordination s3 without etcd: %v", name, err)
			continue
		}
		if c.Coordination != CoordinationS3 || c.UsesEtcd() {
			t.Errorf("%s: coordination %q, UsesEtcd %v", name, c.Coordination, c.UsesEtcd())
		}
		if c.S3Coord.PollMin.Std() != s3coord.DefaultMinPollInterval || c.S3Coord.PollMax.Std() != s3coord.DefaultMaxPollInterval {
			t.Errorf("%s: poll bounds %s..%s, want the backend's defaults", name, c.S3Coord.PollMin, c.S3Coord.PollMax)
		}
		if got := CoordPrefix(c); got != "tenure/default/coord/" {
			t.Errorf("%s: CoordPrefix %q", name, got)
		}
	}
	if c, err := Load(writeFile(t, minimal), nil, nil); err != nil || c.Coordination != CoordinationEtcd || !c.UsesEtcd() {
		t.Errorf("default: coordination %q (%v), want etcd", c.Coordination, err)
	}

	for _, tc := range []struct {
		set  []string
		want string // in the error; "" for none
	}{
		{[]string{"coordination=zookeeper"}, `coordination = zookeeper: must be etcd or s3`},
		{[]string{"coordination=s3", "s3coord.poll_min=0s"}, "s3coord.poll_min = 0s: must be > 0"},
		{[]string{"coordination=s3", "s3coord.poll_min=3s", "s3coord.poll_max=1s"}, "s3coord.poll_max = 1s: must be ≥ s3coord.poll_min (3s)"},
		{[]string{"coordination=s3", "s3coord.poll_max=10s"}, "s3coord.poll_max = 10s: must be < lease.ttl (10s)"},
		{[]string{"coordination=s3", "s3coord.poll_min=50ms", "s3coord.poll_max=5s", "lease.ttl=20s"}, ""},
		// The poll bounds are checked only where they are used.
		{[]string{"s3coord.poll_max=10s"}, ""},
		// On S3 an etcd section is ignored, bad or not.
		{[]string{"coordination=s3", "etcd.request_timeout=0s"}, ""},
	} {
		_, err := Load(writeFile(t, minimal), nil, tc.set)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v, want no error", tc.set, err)
		case tc.want != "" && (err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: %v, want ErrInvalidConfig with %q", tc.set, err, tc.want)
		}
	}
}

// TestOpenRunnerStoreBackend: OpenRunnerStore gives the backend the config
// names; the S3 one makes no request (its bucket need not answer), and
// CoordinationWhere names where each keeps its records.
func TestOpenRunnerStoreBackend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := Load(writeFile(t, "coordination: s3\ns3:\n  bucket: b\n  endpoint: http://127.0.0.1:1\n  region: r\n  access_key: a\n  secret_key: s\n"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := OpenRunnerStore(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rs.(*s3coord.Store); !ok {
		t.Errorf("coordination s3 opened a %T, want *s3coord.Store", rs)
	}
	rs.Close()
	if got, want := CoordinationWhere(cfg)+" "+CoordinationPrefix(cfg), "S3 bucket b at http://127.0.0.1:1 tenure/default/coord/"; got != want {
		t.Errorf("CoordinationWhere, CoordinationPrefix = %q, want %q", got, want)
	}

	ecfg, err := Load(writeFile(t, minimal), nil, []string{"etcd.endpoints=" + testenv.SharedEtcd(t).Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	ers, err := OpenRunnerStore(ctx, ecfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer ers.Close()
	if _, ok := ers.(*etcd.Store); !ok {
		t.Errorf("coordination etcd opened a %T, want *etcd.Store", ers)
	}
	if got := CoordinationWhere(ecfg) + " " + CoordinationPrefix(ecfg); got != "etcd "+ecfg.Etcd.Endpoints[0]+" /tenure/default/" {
		t.Errorf("CoordinationWhere, CoordinationPrefix = %q", got)
	}
}

// TestEtcdRunnerRefusesS3Coordinated: a runner on etcd does not start in a
// cluster whose bucket holds the S3 backend's meta (its runners would each
// own every shard beside the S3 ones), and says which setting to change.
func TestEtcdRunnerRefusesS3Coordinated(t *testing.T) {
	c := newTestCluster(t)
	cfg, _ := c.config("r1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	obj, err := NewObjectStore(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obj.Put(ctx, "coord/meta", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = r.Run(ctx)
	if !errors.Is(err, ErrOtherBackend) || !strings.Contains(err.Error(), "coordination: s3") || !strings.Contains(err.Error(), CoordPrefix(cfg)) {
		t.Fatalf("Run on etcd with an S3 coordination meta in the bucket: %v, want ErrOtherBackend naming coordination: s3 and %s", err, CoordPrefix(cfg))
	}
}

// TestS3RunnerRefusesEtcdCoordinated: the other way round. A runner on
// etcd marks the bucket (coordination/etcd) before it looks for the S3
// backend's meta; a runner on S3 whose bucket holds that mark refuses to
// start, naming the setting, and writes nothing of its own first (no
// coord/meta that would stop the etcd runners at their next start).
func TestS3RunnerRefusesEtcdCoordinated(t *testing.T) {
	c := newTestCluster(t)
	cfg, _ := c.config("r1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	obj, err := NewObjectStore(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// An etcd runner's start leaves the mark.
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	testenv.WaitFor(t, "the etcd runner's mark in the bucket", 30*time.Second, func() bool {
		_, err := obj.Head(ctx, etcdMarkKey)
		return err == nil
	})
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("etcd runner: %v", err)
	}

	s3cfg := cfg
	s3cfg.Coordination = CoordinationS3
	s3cfg.RunnerID = "r2"
	s3cfg.S3Coord.PollMax = Duration(time.Second) // below the test lease
	r2, err := New(s3cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = r2.Run(ctx)
	if !errors.Is(err, ErrOtherBackend) || !strings.Contains(err.Error(), "coordination: etcd") || !strings.Contains(err.Error(), etcdMarkKey) {
		t.Fatalf("Run on S3 with the etcd mark in the bucket: %v, want ErrOtherBackend naming coordination: etcd and %s", err, etcdMarkKey)
	}
	if _, err := obj.Head(ctx, s3MarkKey); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the refused S3 runner left %s behind (Head: %v): the etcd runners would refuse at their next start", s3MarkKey, err)
	}
}

package runner

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/sharding"
)

// TestHandBuiltConfigDerivesAsLoadDoes: a Config filled by hand from
// DefaultConfig with a 3s lease gets the intervals that follow lease.ttl
// as one loaded from a file with the same TTL does, through New (and the
// component configs it builds), not only through Load.
func TestHandBuiltConfigDerivesAsLoadDoes(t *testing.T) {
	hand := DefaultConfig()
	hand.Etcd.Endpoints = []string{"http://127.0.0.1:2379"}
	hand.S3.Bucket = "tasks"
	hand.Lease.TTL = Duration(3 * time.Second)
	if err := hand.Validate(); err != nil {
		t.Fatalf("a hand-built 3s lease: %v", err)
	}
	loaded, err := Load(writeFile(t, minimal+"lease:\n  ttl: 3s\n"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs, ls := hand.ShardingConfig(), loaded.ShardingConfig()
	want := sharding.Config{LeaseTTL: 3 * time.Second, KeepAliveInterval: time.Second, KeepAliveTimeout: 500 * time.Millisecond, LockRefreshInterval: time.Second}
	for _, got := range []sharding.Config{hs, ls} {
		if got.LeaseTTL != want.LeaseTTL || got.KeepAliveInterval != want.KeepAliveInterval || got.KeepAliveTimeout != want.KeepAliveTimeout ||
			got.LockRefreshInterval != want.LockRefreshInterval || got.Detachment.DetachMargin != time.Second {
			t.Errorf("sharding config %+v: want the 3s lease's intervals 1s, 500ms, refresh 1s, margin 1s", got)
		}
	}
	r, err := New(hand)
	if err != nil {
		t.Fatalf("New with a hand-built 3s lease: %v", err)
	}
	if got := r.Config().Lease.KeepAliveInterval; got != Duration(time.Second) {
		t.Errorf("the runner's keep-alive interval %s, want 1s", got)
	}
	// A value set stays set.
	hand.Lease.KeepAliveInterval = Duration(800 * time.Millisecond)
	if got := hand.ShardingConfig().KeepAliveInterval; got != 800*time.Millisecond {
		t.Errorf("a set keep-alive interval became %s", got)
	}
}

// TestComponentErrorsNameTheirKeys: a bad value in a component config is
// reported by its key, from the component's typed error (no Go field name
// in the runner's message), and unwraps to that error.
func TestComponentErrorsNameTheirKeys(t *testing.T) {
	c := DefaultConfig()
	c.Etcd.Endpoints = []string{"http://127.0.0.1:2379"}
	c.S3.Bucket = "tasks"
	c.Sharding.LockRefreshInterval = Duration(time.Hour)
	c.Entity.TaskLease = Duration(time.Second)
	err := c.Validate()
	var se *sharding.ConfigError
	if err == nil || !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &se) || se.Field != "LockRefreshInterval" {
		t.Fatalf("Validate: %v; want a sharding.ConfigError under ErrInvalidConfig", err)
	}
	msg := err.Error()
	for _, want := range []string{"runner: invalid config: sharding.lock_refresh_interval = 1h0m0s: must be in (0, lease.ttl/3",
		"runner: invalid config: entity.task_lease = 1s: must be ≥ 3s"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Validate: %q; want %q", msg, want)
		}
	}
	for _, goName := range []string{"LockRefreshInterval", "TaskLease", "sharding: invalid config", "entity: invalid config"} {
		if strings.Contains(msg, goName) {
			t.Errorf("Validate: %q names %q", msg, goName)
		}
	}
}

// TestLoadFindsTheConfigAsTheCLIDoes: with no path, Load reads the file
// $TENURE_CONFIG names (and does not take the variable for an unknown
// key), else ./.tenure-dev/tenure.yaml; os.DevNull reads none.
func TestLoadFindsTheConfigAsTheCLIDoes(t *testing.T) {
	named := writeFile(t, minimal+"cluster: from-env\n")
	c, err := Load("", []string{ConfigEnv + "=" + named}, nil)
	if err != nil || c.Cluster != "from-env" || len(c.UnknownEnv()) != 0 {
		t.Fatalf("Load with %s: cluster %q, unknown env %v, %v", ConfigEnv, c.Cluster, c.UnknownEnv(), err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(DevConfigPath)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, DevConfigPath), []byte(minimal+"cluster: from-dev\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	if c, err := Load("", nil, nil); err != nil || c.Cluster != "from-dev" {
		t.Fatalf("Load beside a dev config: cluster %q, %v", c.Cluster, err)
	}
	if c, err := Load(os.DevNull, nil, []string{"etcd.endpoints=http://127.0.0.1:2379", "s3.bucket=b"}); err != nil || c.Cluster != "default" {
		t.Fatalf("Load(os.DevNull): cluster %q, %v; want the default", c.Cluster, err)
	}
}

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage/etcd"
)

// soakDuration is how long faults are injected; make integration raises it
// (soak_long_test.go).
var soakDuration = 40 * time.Second

// soakRunners is how many runner processes the soak uses.
var soakRunners = 3

const soakTTL = 3 * time.Second

// newLocalCluster runs the infrastructure in the test process: a 3-member
// etcd cluster (so a test can take the leader away) and the shared
// VersityGW; runners reach member 0 and S3 through per-runner proxies.
func newLocalCluster(t testing.TB, shards int) *cluster {
	t.Helper()
	members := testenv.NewEtcdCluster(t, 3)
	s3 := testenv.SharedS3(t)
	bucket := s3.Bucket(t)
	ak, sk := s3.Credentials()
	dir := t.TempDir()
	c := &cluster{t: t, dir: dir, cfgPath: filepath.Join(dir, "tenure.yaml"), etcdEP: members[0].Endpoint(),
		s3EP: s3.Endpoint(), members: members, shards: shards, runners: map[string]*runnerProc{}}
	cfg := map[string]any{
		"cluster": "dev", // the harness's helpers read /tenure/dev/
		"shards":  shards,
		"etcd":    map[string]any{"endpoints": []string{members[0].Endpoint()}},
		"s3": map[string]any{"endpoint": s3.Endpoint(), "region": s3.Region(), "bucket": bucket, "path_style": true,
			"access_key": ak, "secret_key": sk},
	}
	b, _ := yaml.Marshal(cfg)
	if err := os.WriteFile(c.cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	c.cli = testenv.ClientAt(t, members[0].Endpoint())
	var err error
	c.store, err = etcd.New(c.cli, etcd.WithPrefix(runner.EtcdPrefix("dev")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.store.Close() })
	return c
}

// soakFlags are the runner flags of the soak: a short lease, short S3
// timeouts, the recorder as the "audit" handler.
func soakFlags(rec *recorder) []string {
	return append(append([]string{}, fastRunner...),
		"--set", "lease.ttl="+soakTTL.String(), "--set", "s3.request_timeout=2s", "--set", "etcd.request_timeout=1s",
		"--set", "entity.reconcile_interval=5s", "--set", "log.level=warn",
		"--handler", "audit=http:"+rec.URL())
}

// fault is one kind of injected failure: apply breaks something for a
// runner (or the cluster); heal repairs it.
type fault struct {
	name  string
	apply func(c *cluster, r *runnerProc) (heal func())
	hold  time.Duration
}

func soakFaults(t testing.TB) []fault {
	return []fault{
		{"sigkill", func(c *cluster, r *runnerProc) func() {
			r.signal(t, syscall.SIGKILL)
			r.wait(t, 10*time.Second)
			return func() { c.restart(r) }
		}, 2 * time.Second},
		{"sigstop", func(c *cluster, r *runnerProc) func() {
			r.signal(t, syscall.SIGSTOP)
			return func() { r.signal(t, syscall.SIGCONT) }
		}, soakTTL + time.Second},
		{"etcd-blackhole", func(c *cluster, r *runnerProc) func() {
			r.proxy.SetMode(testenv.Blackhole)
			return func() { r.proxy.SetMode(testenv.Pass) }
		}, 2 * soakTTL},
		{"etcd-slow", func(c *cluster, r *runnerProc) func() {
			r.proxy.SetDelay(300 * time.Millisecond)
			return func() { r.proxy.SetDelay(0) }
		}, 4 * time.Second},
		{"s3-partition", func(c *cluster, r *runnerProc) func() {
			r.s3.set(s3Partitioned, 1)
			return func() { r.s3.set(s3Pass, 0) }
		}, 3 * time.Second},
		{"s3-500", func(c *cluster, r *runnerProc) func() {
			r.s3.set(s3Error500, 0.3)
			return func() { r.s3.set(s3Pass, 0) }
		}, 4 * time.Second},
		{"s3-timeout", func(c *cluster, r *runnerProc) func() {
			r.s3.set(s3Timeout, 0.2)
			return func() { r.s3.set(s3Pass, 0) }
		}, 4 * time.Second},
		{"s3-drop-reply", func(c *cluster, r *runnerProc) func() {
			r.s3.set(s3DropReply, 0.2)
			return func() { r.s3.set(s3Pass, 0) }
		}, 4 * time.Second},
		{"etcd-leader-loss", func(c *cluster, r *runnerProc) func() {
			c.members[1].Close()
			c.members[2].Close()
			return func() {
				for _, m := range c.members[1:] {
					if err := m.Restart(); err != nil {
						t.Errorf("restart etcd member: %v", err)
					}
				}
			}
		}, 3 * time.Second},
		{"restart-same-id", func(c *cluster, r *runnerProc) func() {
			r.signal(t, syscall.SIGTERM)
			if code := r.wait(t, 30*time.Second); code != 0 {
				t.Errorf("%s exited %d after SIGTERM", r.id, code)
			}
			c.restart(r)
			return func() {}
		}, time.Second},
	}
}

// soak runs runners under steady load while faults are injected for the
// soak duration, then audits the run from outside.
func soak(t *testing.T, duration time.Duration, runners int) {
	rec := newRecorder(t)
	c := newLocalCluster(t, 32)
	var ids []string
	for i := 0; i < runners; i++ {
		id := fmt.Sprintf("soak-%d", i)
		ids = append(ids, id)
		c.run(id, soakFlags(rec)...)
	}
	c.waitAllOwned(ids, 60*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	locks := watchLocks(ctx, c)

	// Steady load: tasks for 40 entities and some without, 20–60ms each.
	client := c.taskClient()
	var mu sync.Mutex
	var refs []string
	loadDone := make(chan struct{})
	loadCtx, stopLoad := context.WithCancel(ctx)
	go func() {
		defer close(loadDone)
		rnd := rand.New(rand.NewPCG(1, 2))
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
			}
			req := task.SubmitRequest{Type: "audit", Input: json.RawMessage(fmt.Sprintf(`{"ms":%d}`, 20+rnd.IntN(40))), MaxAttempts: 20}
			if i%4 != 0 {
				req.Entity = fmt.Sprintf("e%02d", rnd.IntN(40))
			}
			sctx, scancel := context.WithTimeout(loadCtx, 10*time.Second)
			tk, _, err := client.Submit(sctx, req)
			scancel()
			if err != nil {
				if loadCtx.Err() == nil {
					t.Logf("submit: %v", err)
				}
				continue
			}
			mu.Lock()
			refs = append(refs, tk.Ref())
			mu.Unlock()
		}
	}()

	// Faults, one at a time, on random runners.
	faults := soakFaults(t)
	counts := map[string]int{}
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	end := time.Now().Add(duration)
	for i := 0; time.Now().Before(end); i++ {
		f := faults[i%len(faults)]
		if i >= len(faults) {
			f = faults[rnd.IntN(len(faults))]
		}
		c.mu.Lock()
		r := c.runners[ids[rnd.IntN(len(ids))]]
		c.mu.Unlock()
		t.Logf("fault %d: %s on %s for %s", i, f.name, r.id, f.hold)
		heal := f.apply(c, r)
		counts[f.name]++
		time.Sleep(f.hold) // the fault's duration: the load keeps running meanwhile
		heal()
		time.Sleep(time.Duration(1000+rnd.IntN(2000)) * time.Millisecond) // quiet gap before the next fault
	}
	stopLoad()
	<-loadDone

	// Everything healed and running: every task must finish.
	c.waitAllOwned(ids, 60*time.Second)
	mu.Lock()
	all := append([]string(nil), refs...)
	mu.Unlock()
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer wcancel()
	for _, ref := range all {
		if _, err := client.Wait(wctx, ref, 200*time.Millisecond); err != nil {
			t.Errorf("task %s did not finish: %v", ref, err)
			break
		}
	}
	rep := audit(t, c, rec.all(), locks, all)
	var kinds []string
	total := 0
	for k, n := range counts {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
		total += n
	}
	sort.Strings(kinds)
	summary := fmt.Sprintf("SOAK SUMMARY: %s with %d runners; faults injected: %d (%s); tasks submitted %d, completed %d, failed %d; executions %d (%d cancelled); overlaps found %d; executions outside lock %d; lost tasks %d; completed twice %d",
		duration, runners, total, strings.Join(kinds, " "), len(all), rep.completed, rep.failed, rep.executions, rep.cancelled,
		len(rep.overlaps), len(rep.outsideLock), len(rep.notTerminal), len(rep.completedTwice))
	t.Log(summary)
	fmt.Println(summary)
	rep.check(t)
	if rep.completed+rep.failed != len(all) {
		t.Errorf("%d of %d tasks accounted for", rep.completed+rep.failed, len(all))
	}
}

// TestSoak: the short soak of make test.
func TestSoak(t *testing.T) { soak(t, soakDuration, soakRunners) }

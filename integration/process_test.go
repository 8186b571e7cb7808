package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
)

// Fast timings for the runner processes: a 3s lease.
var fastRunner = []string{"--set", "lease.ttl=3s", "--set", "detachment.recover_window=500ms",
	"--set", "sharding.rebalance_debounce=50ms", "--set", "sharding.rebalance_interval=2s",
	"--set", "sharding.interrupt_timeout=2s", "--set", "entity.task_lease=3s", "--set", "drain_timeout=10s",
	"--set", "log.level=info"}

// fastLease is fastRunner's lease TTL.
const fastLease = 3 * time.Second

// TestProcessesSIGTERMAndSIGKILL: three `tenure run` processes share the
// shards; SIGTERM has one release each of its shards while its lease
// lives, the others take them on the watch, and it exits 0; SIGKILL of
// another has its lease revoked by etcd within the TTL and its shards
// re-owned on the watch. Timed by the test's watch of the locks, with the
// bounds of bounds_test.go (the timers that could move a shard without a
// watch are a minute away); the log has the figures.
func TestProcessesSIGTERMAndSIGKILL(t *testing.T) {
	c := newCluster(t)
	args := append(slices.Clone(fastRunner), watchOnlyRunner...)
	r1 := c.run("p1", args...)
	c.run("p2", args...)
	r3 := c.run("p3", args...)
	r2 := c.runners.Get("p2")
	c.waitAllOwned([]string{"p1", "p2", "p3"}, 60*time.Second)
	c.waitSettled([]*runnerProc{r1, r2, r3}, 16, 30*time.Second)
	locks := lockWatch(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := c.owners()
	var of1 []storage.ShardID
	for s, r := range before {
		if r == "p1" {
			of1 = append(of1, s)
		}
	}
	if len(of1) == 0 {
		t.Fatal("p1 owns nothing")
	}

	signalled := time.Now()
	r1.signal(t, syscall.SIGTERM)
	moved, err := locks.Await(ctx, "p1's shards owned by p2 and p3", harness.WatchBound, func(h map[storage.ShardID]string) bool {
		for _, s := range of1 {
			if o := h[s]; o != "p2" && o != "p3" {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	t.Logf("SIGTERM: %d shards re-owned %s after the signal", len(of1), moved.Sub(signalled))
	if n := releasedLive(t, c, locks, "p1", of1, signalled); n != len(of1) {
		t.Errorf("SIGTERM: %d of p1's %d locks seen deleted", n, len(of1))
	}
	if code := r1.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("p1 exited %d after SIGTERM, want 0", code)
	}

	own := c.waitAllOwned([]string{"p2", "p3"}, 20*time.Second)
	var of3 []storage.ShardID
	for s, r := range own {
		if r == "p3" {
			of3 = append(of3, s)
		}
	}
	killed := time.Now()
	r3.signal(t, syscall.SIGKILL)
	r3.wait(t, 10*time.Second)
	if _, err := locks.Await(ctx, "etcd to revoke p3's lease", time.Until(killed.Add(harness.RevokeBound(fastLease))), func(h map[storage.ShardID]string) bool {
		for _, s := range of3 {
			if h[s] == "p3" {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatalf("SIGKILL: p3's locks not gone within %s of the kill (lease TTL %s): %v", harness.RevokeBound(fastLease), fastLease, err)
	}
	revoked, once := locks.RevokedAt("p3", of3, killed)
	if !once {
		t.Errorf("SIGKILL: p3's locks went in several revisions, not with its lease")
	}
	if _, err := locks.Await(ctx, "p3's shards re-owned by p2", time.Until(revoked.Add(harness.WatchBound)), func(h map[storage.ShardID]string) bool {
		for _, s := range of3 {
			if h[s] != "p2" {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatalf("SIGKILL: p3's shards not re-owned within %s of its lease's revocation: %v", harness.WatchBound, err)
	}
	failover := locks.TakenAt("p2", of3, killed)
	t.Logf("SIGKILL: %d shards re-owned %s after the kill (lease TTL %s; revoked %s after the kill, re-owned %s after that)",
		len(of3), failover.Sub(killed), fastLease, revoked.Sub(killed), failover.Sub(revoked))
}

// TestDrainCommandLosesNothing: `tenure drain` moves a runner's shards away
// while tasks run, and no task fails.
func TestDrainCommandLosesNothing(t *testing.T) {
	c := newCluster(t)
	d1, d2 := c.run("d1", fastRunner...), c.run("d2", fastRunner...)
	c.waitAllOwned([]string{"d1", "d2"}, 60*time.Second)
	c.waitSettled([]*runnerProc{d1, d2}, 1, 30*time.Second)
	client := c.taskClient()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var refs []string
	for i := 0; i < 40; i++ {
		tk, _, err := client.Submit(ctx, task.SubmitRequest{Type: "sleep", Entity: fmt.Sprintf("e%d", i%8), Input: json.RawMessage(`{"ms":300}`)})
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, tk.Ref())
	}
	tenure(t, "--config", c.cfgPath, "drain", "d1")
	c.waitAllOwned([]string{"d2"}, 20*time.Second)
	for _, ref := range refs {
		done, err := client.Wait(ctx, ref, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if done.Status != task.Completed {
			t.Fatalf("%s ended %s: %s", ref, done.Status, done.Error)
		}
	}
}

// TestStagedRolloutCommand: `tenure config set detachment.mode=observe
// --rollout 50` changes the mode of exactly the runners under the hash cut,
// seen through /debug/status, without restarting any.
func TestStagedRolloutCommand(t *testing.T) {
	c := newCluster(t)
	var rs []*runnerProc
	for i := 0; i < 4; i++ {
		rs = append(rs, c.run(fmt.Sprintf("s%d", i), fastRunner...))
	}
	c.waitAllOwned([]string{"s0", "s1", "s2", "s3"}, 60*time.Second)
	c.waitSettled(rs, 1, 30*time.Second)
	started := map[string]string{}
	for _, r := range rs {
		st, err := r.status()
		if err != nil {
			t.Fatal(err)
		}
		started[r.id] = st.StartedAt
	}
	out := tenure(t, "--config", c.cfgPath, "config", "set", "detachment.mode=observe", "--rollout", "50")
	t.Logf("config set: %s", strings.TrimSpace(out))
	for _, r := range rs {
		want := "enforce"
		if runner.RolloutBucket(r.id) < 50 {
			want = "observe"
		}
		testenv.WaitFor(t, r.id+" running "+want, 10*time.Second, func() bool {
			st, err := r.status()
			return err == nil && st.Mode == want && st.ConfigVersion == 1
		})
		st, _ := r.status()
		if st.StartedAt != started[r.id] || r.exited() {
			t.Fatalf("%s restarted", r.id)
		}
	}
	_, code, stderr := tenureCode(t, "--config", c.cfgPath, "config", "set", "detachment.mode=bogus")
	if code == 0 || !strings.Contains(stderr, "detachment.mode") {
		t.Fatalf("invalid value accepted: exit %d, %s", code, stderr)
	}
}

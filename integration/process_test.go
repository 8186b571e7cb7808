package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"

	"github.com/tenurehq/tenure/internal/testenv"
)

// Fast timings for the runner processes: a 3s lease.
var fastRunner = []string{"--set", "lease.ttl=3s", "--set", "detachment.recover_window=500ms",
	"--set", "sharding.rebalance_debounce=50ms", "--set", "sharding.rebalance_interval=2s",
	"--set", "sharding.interrupt_timeout=2s", "--set", "entity.task_lease=3s", "--set", "drain_timeout=10s",
	"--set", "log.level=info"}

// TestProcessesSIGTERMAndSIGKILL: three `tenure run` processes share the
// shards; SIGTERM hands one's shards over within a second and it exits 0;
// SIGKILL of another has its shards re-owned within lease_ttl + 1s.
func TestProcessesSIGTERMAndSIGKILL(t *testing.T) {
	c := newCluster(t)
	r1 := c.run("p1", fastRunner...)
	c.run("p2", fastRunner...)
	r3 := c.run("p3", fastRunner...)
	r2 := c.runners.Get("p2")
	c.waitAllOwned([]string{"p1", "p2", "p3"}, 60*time.Second)
	c.waitSettled([]*runnerProc{r1, r2, r3}, 16, 30*time.Second)
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
	var movedIn time.Duration
	testenv.WaitFor(t, "p1's shards owned by p2 and p3", 10*time.Second, func() bool {
		own := c.owners()
		for _, s := range of1 {
			if o := own[s]; o != "p2" && o != "p3" {
				return false
			}
		}
		movedIn = time.Since(signalled)
		return true
	})
	t.Logf("SIGTERM: %d shards re-owned %s after the signal", len(of1), movedIn)
	if movedIn > time.Second {
		t.Errorf("SIGTERM handoff took %s; want within 1s", movedIn)
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
	var failover time.Duration
	testenv.WaitFor(t, "p3's shards re-owned by p2", 20*time.Second, func() bool {
		o := c.owners()
		for _, s := range of3 {
			if o[s] != "p2" {
				return false
			}
		}
		failover = time.Since(killed)
		return true
	})
	t.Logf("SIGKILL: %d shards re-owned %s after the kill (lease TTL 3s)", len(of3), failover)
	if failover > 4*time.Second {
		t.Errorf("SIGKILL failover took %s; want within lease_ttl + 1s = 4s", failover)
	}
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

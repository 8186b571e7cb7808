package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
)

// runProcess is `tenure run` as a process of its own: the test binary
// acting as the tenure command.
type runProcess struct {
	id   string
	cmd  *exec.Cmd
	out  *logBuffer
	done chan struct{}
}

// startRunProcess starts `tenure run` on the cluster's config with args
// added; it is stopped (SIGTERM, then SIGKILL) at cleanup.
func (c *cliCluster) startRunProcess(id string, args ...string) *runProcess {
	t := c.t
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &runProcess{id: id, out: &logBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(self, append([]string{"run", "--config", c.cfgPath, "--runner-id", id, "--admin-addr", "127.0.0.1:0"}, args...)...)
	p.cmd.Env = append(os.Environ(), cliMainEnv+"=1")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("tenure run %s output:\n%s", id, p.out.String())
		}
	})
	return p
}

// TestStatusAfterSigkill is the acceptance of `tenure status` telling the
// truth about ownership: after a SIGKILL of one of three `tenure run`
// processes, its shards are reported as held by an unreachable runner,
// with the time left on its lease, until its lease ends and the others
// own them; never as owned by a runner that answers, nor as unowned while
// its lease lives.
func TestStatusAfterSigkill(t *testing.T) {
	c := newCLICluster(t, false) // the first runner writes the meta
	const ttl = 5 * time.Second
	procs := map[string]*runProcess{}
	for _, id := range []string{"p1", "p2", "p3"} {
		procs[id] = c.startRunProcess(id, "--set", "lease.ttl="+ttl.String(), "--set", "log.level=warn")
	}
	var rep StatusReport
	testenv.WaitFor(t, "three runners answering and every shard owned", 90*time.Second, func() bool {
		out, _, err := c.run(Status, "-o", "json")
		if err != nil || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Runners) != 3 || rep.ShardsOwned != cliShards {
			return false
		}
		for _, r := range rep.Runners {
			if !r.Reachable || r.Owned == 0 {
				return false
			}
		}
		return true
	})
	if rep.ShardsHeldUnreachable != 0 {
		t.Fatalf("healthy cluster: %d shards held by unreachable runners", rep.ShardsHeldUnreachable)
	}
	victim := rep.Runners[0]
	for _, r := range rep.Runners {
		if r.Owned > victim.Owned {
			victim = r
		}
	}

	p := procs[victim.ID]
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done // its admin listener is closed: it cannot answer
	killed := time.Now()

	held, shown := 0, false
	testenv.WaitFor(t, "the killed runner's shards owned by the others", ttl+60*time.Second, func() bool {
		out, _, err := c.run(Status, "-o", "json")
		var rep StatusReport
		if err != nil || json.Unmarshal([]byte(out), &rep) != nil {
			t.Fatalf("status -o json: %v\n%s", err, out)
		}
		v := findRunner(rep, victim.ID)
		if v == nil {
			// Its lease has ended: its locks went with it.
			return rep.ShardsOwned == cliShards && rep.ShardsHeldUnreachable == 0 && len(rep.Runners) == 2
		}
		answering := 0
		for _, r := range rep.Runners {
			if r.Reachable {
				answering += r.Owned
			}
		}
		switch {
		case v.Reachable:
			t.Fatalf("%.1fs after SIGKILL, %s answers: %+v", time.Since(killed).Seconds(), v.ID, v)
		case rep.ShardsHeldUnreachable != v.Owned || rep.ShardsOwned-rep.ShardsHeldUnreachable != answering:
			t.Fatalf("%s holds %d shards but %d are counted as held by unreachable runners (%d owned, %d by runners that answer)",
				v.ID, v.Owned, rep.ShardsHeldUnreachable, rep.ShardsOwned, answering)
		case v.LeaseExpiresWithinSeconds == nil || *v.LeaseExpiresWithinSeconds < 0 || *v.LeaseExpiresWithinSeconds > (ttl+time.Second).Seconds():
			t.Fatalf("%s's lease: %v, want a bound in [0, %s]", v.ID, v.LeaseExpiresWithinSeconds, ttl+time.Second)
		case v.Owned > 0:
			held++
			if !shown {
				shown = true
				if out := c.mustRun(Status); !strings.Contains(out, " held by unreachable runners (lease ") {
					t.Errorf("human status while %s's lease lives:\n%s", v.ID, out)
				}
			}
		}
		return false
	})
	if held == 0 {
		t.Errorf("no status between the SIGKILL and the end of the lease showed %s's shards as held by an unreachable runner", victim.ID)
	}
	t.Logf("%d reports showed %s's %d shards held by an unreachable runner; re-owned %.1fs after the SIGKILL", held, victim.ID, victim.Owned, time.Since(killed).Seconds())
}

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/poll"
)

// faultScope is what a fault breaks, and so what two faults at the same
// time must not share.
type faultScope int

const (
	onRunner  faultScope = iota // one runner process or its connections
	onCluster                   // the coordination backend: the etcd cluster, or every runner's S3
	onClient                    // the soak's submitter (its S3 proxy)
)

// fault is one kind of injected failure: apply breaks something for a
// runner (or the cluster, or the submitter) and returns how to repair it;
// the soak holds it for hold in between.
type fault struct {
	name  string
	scope faultScope
	what  string // what is injected, for the log and RELIABILITY.md
	apply func(c *cluster, r *runnerProc) (heal func())
	hold  time.Duration
}

// soakFaults are the kinds of fault the soak injects on the coordination
// backend coordination names ("etcd" or "s3"). sub is the submitter's S3
// proxy.
func soakFaults(t testing.TB, sub *s3Proxy, coordination string) []fault {
	if coordination == "s3" {
		return s3SoakFaults(t, sub)
	}
	return etcdSoakFaults(t, sub, soakTTL)
}

// etcdSoakFaults are the soak's faults on a cluster coordinating on etcd,
// whose runners' lease TTL is ttl.
func etcdSoakFaults(t testing.TB, sub *s3Proxy, ttl time.Duration) []fault {
	return []fault{
		{"sigkill", onRunner, "SIGKILL the runner process, restart it (same id) after the hold", func(c *cluster, r *runnerProc) func() {
			r.signal(t, syscall.SIGKILL)
			r.wait(t, 10*time.Second)
			return func() { c.restartUntilUp(r) }
		}, 2 * time.Second},
		{"sigstop", onRunner, "SIGSTOP the runner process (a paused zombie) for longer than the lease TTL, then SIGCONT", func(c *cluster, r *runnerProc) func() {
			r.signal(t, syscall.SIGSTOP)
			return func() { r.signal(t, syscall.SIGCONT) }
		}, ttl + time.Second},
		{"etcd-blackhole", onRunner, "blackhole the runner's TCP connection to etcd (a partition; S3 still reachable) for 2 TTLs", func(c *cluster, r *runnerProc) func() {
			r.proxy.SetMode(testenv.Blackhole)
			return func() { r.proxy.SetMode(testenv.Pass) }
		}, 2 * ttl},
		{"etcd-slow", onRunner, "delay every chunk between the runner and etcd by 300ms", func(c *cluster, r *runnerProc) func() {
			r.proxy.SetDelay(300 * time.Millisecond)
			return func() { r.proxy.SetDelay(0) }
		}, 4 * time.Second},
		{"s3-partition", onRunner, "reset every S3 request of the runner (connection closed, nothing forwarded)", func(c *cluster, r *runnerProc) func() {
			r.s3.set(s3Partitioned, 1)
			return func() { r.s3.set(s3Pass, 0) }
		}, 3 * time.Second},
		{"s3-500", onRunner, "answer 30% of the runner's S3 requests 500 InternalError without forwarding", func(c *cluster, r *runnerProc) func() {
			r.s3.set(s3Error500, 0.3)
			return func() { r.s3.set(s3Pass, 0) }
		}, 4 * time.Second},
		{"s3-timeout", onRunner, "hold 20% of the runner's S3 requests, unforwarded, until the runner gives up", func(c *cluster, r *runnerProc) func() {
			r.s3.set(s3Timeout, 0.2)
			return func() { r.s3.set(s3Pass, 0) }
		}, 4 * time.Second},
		{"s3-drop-reply", onRunner, "forward 20% of the runner's S3 requests (the write happens) and drop the answer", func(c *cluster, r *runnerProc) func() {
			r.s3.set(s3DropReply, 0.2)
			return func() { r.s3.set(s3Pass, 0) }
		}, 4 * time.Second},
		{"etcd-leader-loss", onCluster, "stop 2 of the 3 etcd members (no quorum, no leader), restart them after the hold", func(c *cluster, r *runnerProc) func() {
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
		{"restart-same-id", onRunner, "SIGTERM the runner (graceful drain), which must exit 0, and start it again with the same id", func(c *cluster, r *runnerProc) func() {
			r.signal(t, syscall.SIGTERM)
			if code := r.wait(t, 30*time.Second); code != 0 {
				t.Errorf("%s exited %d after SIGTERM", r.id, code)
			}
			c.restartUntilUp(r)
			return func() {}
		}, time.Second},
		{"client-s3-drop-reply", onClient, "forward 70% of the submitter's S3 requests and drop the answer: submits whose outcome is unknown", func(c *cluster, r *runnerProc) func() {
			sub.set(s3DropReply, 0.7)
			return func() { sub.set(s3Pass, 0) }
		}, 3 * time.Second},
		{"client-s3-500", onClient, "answer half of the submitter's S3 requests 500 without forwarding: submits that fail", func(c *cluster, r *runnerProc) func() {
			sub.set(s3Error500, 0.5)
			return func() { sub.set(s3Pass, 0) }
		}, 3 * time.Second},
	}
}

// s3SoakFaults are the soak's faults on a cluster coordinating on S3:
// those that do not involve etcd, and the S3 ones in place of those that
// do (a runner's S3 blackholed, slowed, and S3 throttling every runner).
func s3SoakFaults(t testing.TB, sub *s3Proxy) []fault {
	replaced := map[string]fault{
		"etcd-blackhole": {"s3-blackhole", onRunner, "blackhole the runner's S3 (connections accepted, nothing forwarded or answered; a partition) for 2 TTLs", func(c *cluster, r *runnerProc) func() {
			r.s3.set(s3Blackhole, 1)
			return func() { r.s3.set(s3Pass, 0) }
		}, 2 * s3SoakTTL},
		"etcd-slow": {"s3-slow", onRunner, "delay every S3 request of the runner by 300ms", func(c *cluster, r *runnerProc) func() {
			r.s3.setLag(300 * time.Millisecond)
			return func() { r.s3.setLag(0) }
		}, 4 * time.Second},
		"etcd-leader-loss": {"s3-slowdown-all", onCluster, "answer every S3 request of every runner 503 SlowDown (S3 throttling the whole cluster)", func(c *cluster, r *runnerProc) func() {
			rs := c.runners.All()
			for _, r := range rs {
				r.s3.set(s3SlowDown, 1)
			}
			return func() {
				for _, r := range rs {
					r.s3.set(s3Pass, 0)
				}
			}
		}, 3 * time.Second},
	}
	var out []fault
	for _, f := range etcdSoakFaults(t, sub, s3SoakTTL) {
		if g, ok := replaced[f.name]; ok {
			f = g
		}
		out = append(out, f)
	}
	return out
}

// restartUntilUp starts a runner again and waits until it has registered;
// a start that fails (e.g. etcd has no leader, or S3 throttles every
// runner, at that moment: a runner refuses to start without the cluster
// meta) is tried again, for up to a minute.
func (c *cluster) restartUntilUp(r *runnerProc) {
	c.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for try := 1; ; try++ {
		c.restart(r)
		registered := false
		poll.Until(context.Background(), time.Until(deadline), 100*time.Millisecond, func() (bool, string, error) {
			st, err := r.status()
			registered = err == nil && st.Registered
			return registered || r.exited(), "", nil
		})
		switch {
		case registered:
			return
		case !r.exited():
			c.t.Errorf("%s not registered a minute after its restart", r.id)
			return
		case time.Now().After(deadline):
			c.t.Errorf("%s: %d restarts in a minute all exited", r.id, try)
			return
		}
		c.t.Logf("%s exited at start (try %d); starting it again", r.id, try)
		time.Sleep(500 * time.Millisecond) // back off before the next start
	}
}

// faultPlan schedules faults: one starts about every interval (±50%), on a
// random runner not under another fault (cluster and submitter faults
// take their own slot), in rounds that take every kind once in a shuffled
// order, so that every kind comes up as often as the others.
type faultPlan struct {
	t        testing.TB
	c        *cluster
	ids      []string
	kinds    []fault
	interval time.Duration
	rnd      *rand.Rand

	mu     sync.Mutex
	busy   map[string]bool // runner id, or "cluster" / "client"
	freed  chan struct{}   // closed and replaced whenever a slot frees
	counts map[string]int
	wg     sync.WaitGroup
}

func newFaultPlan(t testing.TB, c *cluster, ids []string, kinds []fault, interval time.Duration, seed uint64) *faultPlan {
	return &faultPlan{t: t, c: c, ids: ids, kinds: kinds, interval: interval, rnd: rand.New(rand.NewPCG(seed, 3)),
		busy: map[string]bool{}, freed: make(chan struct{}), counts: map[string]int{}}
}

// slotOf returns the slot f takes and the runner it applies to, or ok
// false when no slot is free.
func (p *faultPlan) slotOf(f fault) (slot string, r *runnerProc, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch f.scope {
	case onCluster:
		slot = "cluster"
	case onClient:
		slot = "client"
	default:
		var free []string
		for _, id := range p.ids {
			if !p.busy[id] {
				free = append(free, id)
			}
		}
		if len(free) == 0 {
			return "", nil, false
		}
		slot = free[p.rnd.IntN(len(free))]
	}
	if p.busy[slot] {
		return "", nil, false
	}
	p.busy[slot] = true
	p.counts[f.name]++
	r = p.c.runners.Get(p.ids[p.rnd.IntN(len(p.ids))])
	if f.scope == onRunner {
		r = p.c.runners.Get(slot)
	}
	return slot, r, true
}

func (p *faultPlan) free(slot string) {
	p.mu.Lock()
	delete(p.busy, slot)
	close(p.freed)
	p.freed = make(chan struct{})
	p.mu.Unlock()
}

// run injects faults until end, then waits for every one to heal. If by
// end some kind has not come up yet (a slow machine: restarts take longer
// and hold their slots), it goes on until every kind has, for at most as
// long again, so that a short soak still tries every kind.
func (p *faultPlan) run(end time.Time) {
	var round []fault
	n := 0
	last := end.Add(time.Until(end)) // the latest end, for kinds not yet injected
	deadline := func() time.Time {
		if len(p.missing()) == 0 {
			return end
		}
		return last
	}
	for {
		if len(round) == 0 {
			round = append([]fault(nil), p.kinds...)
			p.rnd.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		}
		f := round[0]
		// Wait for the next start, then for a slot for f.
		gap := p.interval/2 + time.Duration(p.rnd.Int64N(int64(p.interval)+1))
		if time.Now().Add(gap).After(deadline()) {
			break
		}
		time.Sleep(gap) // the fault rate, not synchronisation
		var slot string
		var r *runnerProc
		for {
			p.mu.Lock()
			freed := p.freed
			p.mu.Unlock()
			var ok bool
			if slot, r, ok = p.slotOf(f); ok {
				break
			}
			select {
			case <-freed:
			case <-time.After(time.Until(deadline())):
			}
			if !time.Now().Before(deadline()) {
				break
			}
		}
		if slot == "" {
			break
		}
		round = round[1:]
		n++
		target := r.id
		switch f.scope {
		case onCluster:
			target = "the etcd cluster"
			if p.c.Etcd == "" {
				target = "every runner's S3"
			}
		case onClient:
			target = "the submitter"
		}
		p.t.Logf("fault %d: %s on %s for %s", n, f.name, target, f.hold)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.free(slot)
			heal := f.apply(p.c, r)
			time.Sleep(f.hold) // the fault's duration: the load keeps running meanwhile
			heal()
			// A quiet moment before this slot takes another fault.
			time.Sleep(time.Duration(1000+rand.IntN(2000)) * time.Millisecond)
		}()
	}
	p.wg.Wait()
}

// total returns the number of faults injected and "kind=n …", sorted.
func (p *faultPlan) total() (int, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var parts []string
	n := 0
	for _, f := range p.kinds {
		parts = append(parts, fmt.Sprintf("%s=%d", f.name, p.counts[f.name]))
		n += p.counts[f.name]
	}
	sort.Strings(parts)
	return n, strings.Join(parts, " ")
}

// missing returns the kinds never injected.
func (p *faultPlan) missing() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, f := range p.kinds {
		if p.counts[f.name] == 0 {
			out = append(out, f.name)
		}
	}
	return out
}

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
)

// The soak's defaults: TestSoak in make test runs them; make integration
// raises them (soak_long_test.go); the TENURE_SOAK_* environment variables
// override them (make soak).
var (
	soakDuration      = 40 * time.Second // how long faults are injected
	soakRunners       = 3                // runner processes
	soakFaultInterval = 2 * time.Second  // mean time between fault starts
)

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
	cfg := map[string]any{
		"cluster": "dev", // the harness's helpers read /tenure/dev/
		"shards":  shards,
		"etcd":    map[string]any{"endpoints": []string{members[0].Endpoint()}},
		"s3": map[string]any{"endpoint": s3.Endpoint(), "region": s3.Region(), "bucket": bucket, "path_style": true,
			"access_key": ak, "secret_key": sk},
	}
	b, _ := yaml.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "tenure.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	c := newClusterOn(t, dir, members[0].Endpoint(), shards)
	c.s3EP, c.members = s3.Endpoint(), members
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

// s3SoakTTL is the runners' lease TTL on S3: twice soakTTL. A renewal is
// an S3 conditional write, bounded by TTL/6; with a 3s TTL (500ms) on 2
// busy cores, against the test process's gateway, renewals timed out
// again and again with no fault injected, and every runner lost its lease
// every few seconds (then ran almost no task).
const s3SoakTTL = 2 * soakTTL

// s3SoakFlags are soakFlags for runners coordinating on S3: no etcd
// setting, and s3SoakTTL.
func s3SoakFlags(rec *recorder) []string {
	return append(append([]string{}, fastRunner...),
		"--set", "lease.ttl="+s3SoakTTL.String(), "--set", "s3.request_timeout=2s",
		"--set", "entity.reconcile_interval=5s", "--set", "log.level=warn",
		"--handler", "audit=http:"+rec.URL())
}

// soakConfig is one soak's settings.
type soakConfig struct {
	duration time.Duration // how long faults are injected
	runners  int           // runner processes
	interval time.Duration // mean time between fault starts
	// minFaults, if set, fails the soak if fewer faults were injected.
	minFaults int
	seed      uint64 // of the fault plan
	// coordination is the runners' coordination backend: "etcd" (the
	// default) or "s3".
	coordination string
}

// soakConfigFromEnv returns the defaults, overridden by
// TENURE_SOAK_DURATION, TENURE_SOAK_RUNNERS, TENURE_SOAK_FAULT_INTERVAL,
// TENURE_SOAK_MIN_FAULTS, TENURE_SOAK_SEED and TENURE_SOAK_COORDINATION.
func soakConfigFromEnv(t testing.TB) soakConfig {
	cfg := soakConfig{duration: soakDuration, runners: soakRunners, interval: soakFaultInterval, seed: uint64(time.Now().UnixNano()),
		coordination: "etcd"}
	dur := func(name string, into *time.Duration) {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				t.Fatalf("%s=%q: want a positive duration such as 20m", name, v)
			}
			*into = d
		}
	}
	num := func(name string, into *int, least int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < least {
				t.Fatalf("%s=%q: want an integer ≥ %d", name, v, least)
			}
			*into = n
		}
	}
	dur("TENURE_SOAK_DURATION", &cfg.duration)
	dur("TENURE_SOAK_FAULT_INTERVAL", &cfg.interval)
	num("TENURE_SOAK_RUNNERS", &cfg.runners, 2)
	num("TENURE_SOAK_MIN_FAULTS", &cfg.minFaults, 0)
	if v := os.Getenv("TENURE_SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("TENURE_SOAK_SEED=%q: want an unsigned integer", v)
		}
		cfg.seed = n
	}
	switch v := os.Getenv("TENURE_SOAK_COORDINATION"); v {
	case "":
	case "etcd", "s3":
		cfg.coordination = v
	default:
		t.Fatalf("TENURE_SOAK_COORDINATION=%q: want etcd or s3", v)
	}
	return cfg
}

// soak runs runners under steady load while faults are injected for the
// soak duration, then audits the run from outside: every submit accounted
// for by id (ambiguous ones resolved), every accepted task read back with
// its history, the recorder's executions against the lock timeline (an
// etcd watch, or on S3 a poll of the gateway: see watchS3Locks for the lag
// the acquisition edge is given there).
func soak(tt *testing.T, cfg soakConfig) {
	t := noteFailures(tt) // first: its restatement of the failures is the last output
	rec := newRecorder(t)
	var c *cluster
	flags := soakFlags(rec)
	if cfg.coordination == "s3" {
		c = newS3Cluster(t, 32)
		flags = s3SoakFlags(rec)
	} else {
		c = newLocalCluster(t, 32)
	}
	// Each runner's whole log, attachments included, for the report on an
	// execution flagged outside the lock (explainOutsideLock).
	c.logRunnersTo(t.TempDir())
	var ids []string
	for i := 0; i < cfg.runners; i++ {
		id := fmt.Sprintf("soak-%d", i)
		ids = append(ids, id)
		c.run(id, flags...)
	}
	// A runner that exits at start (its first request to the backend
	// timed out on a busy machine) leaves the others owning every shard:
	// start it again, or the soak runs short of a runner and its faults
	// find a finished process.
	for _, id := range ids {
		r := c.runners.Get(id)
		testenv.WaitFor(t, id+" registered, or exited", 60*time.Second, func() bool {
			st, err := r.status()
			return (err == nil && st.Registered) || r.exited()
		})
		if r.exited() {
			t.Logf("%s exited at start; starting it again", id)
			c.restartUntilUp(r)
		}
	}
	c.waitAllOwned(ids, 60*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var locks *harness.LockTimeline
	if cfg.coordination == "s3" {
		locks = watchS3Locks(ctx, c)
	} else {
		locks = watchLocks(ctx, c)
	}

	// The submitter reaches S3 through a fault proxy of its own, so that
	// some submits end in an error with their outcome unknown.
	sub := newS3Proxy(t, c.s3EP)
	client := c.newTaskClient("s3.endpoint=" + sub.URL())
	book := newLedger(c.Meta.Shards)

	// Steady load: tasks for 40 entities and some without, 20–60ms each,
	// every one under an id chosen here and recorded in the ledger.
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := book.submitEvery(loadCtx, t, client, 50*time.Millisecond, 1, func(i int, rnd *rand.Rand) task.SubmitRequest {
		req := task.SubmitRequest{Type: "audit", Input: json.RawMessage(fmt.Sprintf(`{"ms":%d}`, 20+rnd.IntN(40))), MaxAttempts: 20}
		if i%4 != 0 {
			req.Entity = fmt.Sprintf("e%02d", rnd.IntN(40))
		}
		return req
	})

	t.Logf("soak: %s of faults, %d runners coordinating on %s, a fault every ~%s, seed %d", cfg.duration, cfg.runners, cfg.coordination, cfg.interval, cfg.seed)
	plan := newFaultPlan(t, c, ids, soakFaults(t, sub, cfg.coordination), cfg.interval, cfg.seed)
	start := time.Now()
	plan.run(start.Add(cfg.duration))
	stopLoad()
	<-loadDone
	faultTime := time.Since(start)

	// Everything healed and running: every accepted task must finish.
	for _, id := range ids {
		if r := c.runners.Get(id); r.exited() {
			t.Errorf("runner %s is not running after the faults healed", id)
		}
	}
	c.waitAllOwned(ids, 60*time.Second)
	direct := c.taskClient()
	if err := book.resolve(ctx, direct, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	accepted, rejected := book.accepted()
	if pending := waitTerminal(ctx, direct, accepted, 3*time.Minute); len(pending) > 0 {
		t.Logf("%d accepted tasks not terminal after 3 minutes, e.g. %v", len(pending), pending[:min(len(pending), 5)])
		// Say what each runner thinks it is doing: a runner attached and
		// owning shards that runs nothing is told apart from one detached.
		for _, id := range ids {
			st, err := c.runners.Get(id).status()
			t.Logf("%s: attached %v, registered %v, owned %d, assigned %d, pending %d (%v)", id, st.Attached, st.Registered, st.Owned, st.Assigned, st.Pending, err)
		}
	}
	rep := audit(t, direct, rec.all(), locks, accepted, rejected)
	lc := book.counts()
	total, kinds := plan.total()
	summary := fmt.Sprintf("SOAK SUMMARY: %s of faults (%s in all) with %d runners coordinating on %s, a fault every ~%s; faults injected: %d (%s); "+
		"submits %d: %d accepted at once, %d ambiguous resolved by id (%d existed, %d not accepted); "+
		"tasks completed %d, failed %d, cancelled %d; executions %d (%d cancelled); "+
		"overlaps %d; executions outside the lock %d; lost tasks %d; double completions %d; "+
		"history anomalies %d; completions without a recorded run %d; not-accepted submits that exist or ran %d",
		cfg.duration, time.Since(start).Round(time.Second), cfg.runners, cfg.coordination, cfg.interval, total, kinds,
		lc.submits, lc.clean, lc.ambiguous, lc.existed, lc.notAccepted,
		rep.completed, rep.failed, rep.cancelledTasks, rep.executions, rep.cancelled,
		len(rep.overlaps), len(rep.outsideLock), len(rep.lost), len(rep.completedTwice),
		len(rep.historyAnomalies), len(rep.unrecordedCompletions), len(rep.phantoms))
	t.Log(summary)
	fmt.Println(summary)
	t.Logf("faults ran for %s; %d task histories were truncated (older entries dropped); %d executions ran under a tenure the live lock watch never showed, judged by etcd's history",
		faultTime.Round(time.Second), rep.truncatedHistories, rep.placedByHistory)
	rep.explainOutsideLock(t, locks, c)
	rep.check(t)
	if n := rep.completed + rep.failed + rep.cancelledTasks; n != len(accepted) || lc.unresolved != 0 {
		t.Errorf("%d of %d accepted tasks accounted for; %d submits unresolved", n, len(accepted), lc.unresolved)
	}
	if missing := plan.missing(); len(missing) > 0 {
		t.Errorf("fault kinds never injected: %v", missing)
	}
	if total < cfg.minFaults {
		t.Errorf("%d faults injected, want at least %d (TENURE_SOAK_MIN_FAULTS)", total, cfg.minFaults)
	}
}

// TestSoak: the short soak of make test; make soak and make integration
// set longer ones.
func TestSoak(t *testing.T) { soak(t, soakConfigFromEnv(t)) }

package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/messaging"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
)

// The proof of entity messaging with `tenure run` processes:
// every entity answers through every runner's HTTP + JSON path, SIGTERM of
// a runner under load costs callers nothing, SIGKILL makes its entities
// unavailable until etcd revokes the dead lease and the watches move them
// (see TestCallsSIGKILLUnavailability), and a runner cut from etcd refuses
// calls once detached while the audit finds no two runs of one entity at
// once, across calls and tasks.

// callLease is the runner lease of these tests (fastRunner's).
const callLease = 3 * time.Second

// startCallCluster starts a runner per id with fastRunner and extra, and
// waits until they share the shards, settled.
func startCallCluster(t *testing.T, extra func(id string) []string, ids ...string) (*cluster, []*runnerProc) {
	t.Helper()
	c := newCluster(t)
	var rs []*runnerProc
	for _, id := range ids {
		args := slices.Clone(fastRunner)
		if extra != nil {
			args = append(args, extra(id)...)
		}
		rs = append(rs, c.run(id, args...))
	}
	c.waitAllOwned(ids, 60*time.Second)
	c.waitSettled(rs, 1, 30*time.Second)
	return c, rs
}

// callClient connects a runner.Client to the cluster, straight on etcd
// (no runner's proxy), for entity calls from the test process.
func (c *cluster) callClient() *runner.Client {
	c.t.Helper()
	cfg, err := runner.Load(c.cfgPath, nil, []string{"etcd.endpoints=" + c.Etcd, "log.level=warn"})
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := runner.Connect(ctx, cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cli.Close() })
	return cli
}

// entitiesOf splits ids of entity type typ by the runner holding their
// shard now.
func (c *cluster) entitiesOf(typ string, ids []string) map[string][]string {
	own := c.owners()
	out := map[string][]string{}
	for _, id := range ids {
		r := own[task.ShardOf(storage.DefaultGroup, c.Meta.Shards, typ, id, "")]
		out[r] = append(out[r], id)
	}
	return out
}

// echoLoad starts callers calling echo through cli over ids: each call's
// input names its entity, and a reply that is not that input fails it.
func echoLoad(cli *runner.Client, callers int, ids []string, timeout time.Duration) *harness.CallLoad {
	return harness.StartCallLoad(callers, ids, timeout, func(ctx context.Context, id string) ([]byte, error) {
		in := []byte(`{"e":"` + id + `"}`)
		reply, err := cli.Call(ctx, runner.TypeEcho, id, in)
		if err == nil && !bytes.Equal(reply, in) {
			err = fmt.Errorf("echo %s replied %q", id, reply)
		}
		return reply, err
	})
}

func numbered(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	return ids
}

// serverDelivered reads tenure_call_server_requests_total{outcome="ok"}
// from a runner's /metrics.
func (r *runnerProc) serverDelivered(t *testing.T) float64 {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + r.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	const series = `tenure_call_server_requests_total{outcome="ok"} `
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s /metrics: %q: %v", r.id, sc.Text(), err)
			}
			return f
		}
	}
	return 0
}

// postCall makes a call through a runner's HTTP + JSON path.
func postCall(hc *http.Client, admin, typ, id, query string, body []byte) (int, []byte, error) {
	resp, err := hc.Post("http://"+admin+"/v1/entities/"+typ+"/"+id+query, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// TestCallsHTTPEveryEntityThroughEveryRunner: 1,000 entities answer
// through each of 3 runners' POST /v1/entities/echo/ID, with the reply the
// echo of the request; the requests for entities a runner does not own
// were forwarded to their owners' call servers (seen in their metrics).
func TestCallsHTTPEveryEntityThroughEveryRunner(t *testing.T) {
	ids := []string{"w1", "w2", "w3"}
	c, rs := startCallCluster(t, nil, ids...)
	entities := numbered(1000)
	hc := &http.Client{Timeout: 15 * time.Second}
	for _, via := range rs {
		byOwner := c.entitiesOf(runner.TypeEcho, entities)
		before := map[string]float64{}
		for _, r := range rs {
			before[r.id] = r.serverDelivered(t)
		}
		var mu sync.Mutex
		var bad []string
		start := time.Now()
		harness.ForEach(len(entities), 16, func(i int) {
			id := entities[i]
			body := []byte(`{"e":"` + id + `","via":"` + via.id + `"}`)
			code, reply, err := postCall(hc, via.admin, runner.TypeEcho, id, "", body)
			if err != nil || code != http.StatusOK || !bytes.Equal(bytes.TrimSpace(reply), body) {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("%s: %d %s %v", id, code, reply, err))
				mu.Unlock()
			}
		})
		took := time.Since(start)
		if len(bad) > 0 {
			t.Fatalf("through %s: %d of %d calls wrong, e.g. %v", via.id, len(bad), len(entities), bad[:min(3, len(bad))])
		}
		delivered := map[string]float64{}
		for _, r := range rs {
			delivered[r.id] = r.serverDelivered(t) - before[r.id]
		}
		t.Logf("through %s: %d calls in %s (%.0f/s); owners %d/%d/%d; forwarded to the servers %v", via.id, len(entities),
			took.Round(time.Millisecond), float64(len(entities))/took.Seconds(), len(byOwner["w1"]), len(byOwner["w2"]), len(byOwner["w3"]), delivered)
		for _, r := range rs {
			want := float64(len(byOwner[r.id]))
			if r == via {
				want = 0 // its own entities: the local path
			}
			if delivered[r.id] != want {
				t.Errorf("through %s: %s's server delivered %v calls, want %v", via.id, r.id, delivered[r.id], want)
			}
		}
	}
}

// TestCallsSIGTERMUnderLoad: 64 callers in the test process call entities
// spread over 3 runner processes while one gets SIGTERM: no caller sees an
// error, and its entities answer on their new owners.
func TestCallsSIGTERMUnderLoad(t *testing.T) {
	c, rs := startCallCluster(t, nil, "g1", "g2", "g3")
	victim := rs[2]
	cli := c.callClient()
	ids := numbered(192)
	victims := c.entitiesOf(runner.TypeEcho, ids)["g3"]
	isVictim := func(id string) bool { return slices.Contains(victims, id) }
	load := echoLoad(cli, 64, ids, 10*time.Second)
	defer load.Stop()
	loadStart := time.Now()
	testenv.WaitFor(t, "calls under way", 20*time.Second, func() bool {
		return load.Count(func(s harness.CallSample) bool { return s.Err == nil && isVictim(s.ID) }) >= 500
	})
	signalled := time.Now()
	victim.signal(t, syscall.SIGTERM)
	if code := victim.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("g3 exited %d after SIGTERM, want 0", code)
	}
	exited := time.Now()
	testenv.WaitFor(t, "calls to g3's former entities after it exited", 20*time.Second, func() bool {
		return load.Count(func(s harness.CallSample) bool { return s.Err == nil && isVictim(s.ID) && s.Start.After(exited) }) >= 500
	})
	calls := load.Stop()
	all, handoff := harness.Stats(calls, loadStart, time.Now()), harness.Stats(calls, signalled, exited)
	t.Logf("SIGTERM under 64 callers: %d calls, %.0f calls/s, max latency %s; from the signal to the exit (%s): %d calls, %.0f calls/s, max latency %s; errors %d",
		all.Calls, all.PerSecond, all.MaxLatency.Round(time.Microsecond), exited.Sub(signalled).Round(time.Millisecond),
		handoff.Calls, handoff.PerSecond, handoff.MaxLatency.Round(time.Microsecond), all.Errors)
	for _, s := range calls {
		if s.Err != nil {
			t.Fatalf("%d caller-visible errors across the planned handoff, e.g. %s at %s: %v",
				all.Errors, s.ID, s.Start.Sub(signalled).Round(time.Millisecond), s.Err)
		}
	}
}

// TestCallsSIGKILLUnavailability: SIGKILL of one of 3 runner processes
// under 64 callers (10 s deadlines, so that a call waits for the new owner
// rather than fails). Etcd revokes the dead lease within its TTL of the
// kill (revokeBound), and each of its entities answers again once the
// watches have moved its shard: within harness.WatchBound of the revocation,
// among runners whose timers that could move it are a minute away
// (watchOnlyRunner). Timed by the test's watch of the locks; the log has
// the figures (the TTL + 0.5 s from the kill targeted, a quiet machine's,
// is `tenure bench`'s crash scenario's to measure).
//
// The only errors allowed are ErrOutcomeUnknown for calls started before
// the kill: sent to the killed process, they may have run there before it
// died, and a call is never sent twice when its first attempt may have run
// (at most once); every other call must wait for the successor and
// succeed.
func TestCallsSIGKILLUnavailability(t *testing.T) {
	c, rs := startCallCluster(t, func(string) []string { return watchOnlyRunner }, "k1", "k2", "k3")
	victim := rs[2]
	locks := lockWatch(t, c)
	cli := c.callClient()
	ids := numbered(96)
	victims := c.entitiesOf(runner.TypeEcho, ids)["k3"]
	if len(victims) == 0 {
		t.Fatal("k3 owns none of the entities")
	}
	var shards []storage.ShardID
	for s, r := range c.owners() {
		if r == "k3" {
			shards = append(shards, s)
		}
	}
	load := echoLoad(cli, 64, ids, 10*time.Second)
	defer load.Stop()
	testenv.WaitFor(t, "calls under way", 20*time.Second, func() bool {
		return load.Count(func(s harness.CallSample) bool { return s.Err == nil }) >= 2000
	})
	killed := time.Now()
	victim.signal(t, syscall.SIGKILL)
	victim.wait(t, 10*time.Second)
	dead := time.Now() // a call started after this cannot have reached k3
	// back[id] is when a call to id made after the kill first succeeded.
	back := map[string]time.Time{}
	firstBack := func() bool {
		for _, s := range load.Calls() {
			if s.Err == nil && s.Start.After(dead) && slices.Contains(victims, s.ID) {
				if b, ok := back[s.ID]; !ok || s.End.Before(b) {
					back[s.ID] = s.End
				}
			}
		}
		return len(back) == len(victims)
	}
	testenv.WaitFor(t, "every entity of k3 answering again", 20*time.Second, firstBack)
	calls := load.Stop()
	firstBack()
	revoked, once := locks.RevokedAt("k3", shards, killed)
	if revoked.IsZero() {
		t.Fatal("the lock watch saw no lock of k3 released after the kill")
	}
	if !once {
		t.Errorf("k3's locks went in several revisions, not with its lease")
	}

	var worst, sum time.Duration
	for _, b := range back {
		d := b.Sub(killed)
		worst = max(worst, d)
		sum += d
	}
	var unknown int
	var others []harness.CallSample
	for _, s := range calls {
		switch {
		case s.Err == nil:
		case errors.Is(s.Err, messaging.ErrOutcomeUnknown) && s.Start.Before(dead):
			unknown++
		default:
			others = append(others, s)
		}
	}
	st := harness.Stats(calls, killed, killed.Add(worst))
	afterLease := worst - revoked.Sub(killed)
	t.Logf("SIGKILL under 64 callers: %d entities of k3 unavailable for max %s, mean %s (lease TTL %s; the lease revoked %s after the kill, the entities answered again %s after that); %d calls while they were unavailable, max latency %s; errors: %d outcome unknown (in flight on k3), %d other",
		len(victims), worst.Round(time.Millisecond), (sum / time.Duration(len(back))).Round(time.Millisecond), callLease,
		revoked.Sub(killed).Round(time.Millisecond), afterLease.Round(time.Millisecond),
		st.Calls, st.MaxLatency.Round(time.Millisecond), unknown, len(others))
	if len(others) > 0 {
		s := others[0]
		t.Errorf("%d calls failed otherwise than outcome-unknown in flight at the kill, e.g. %s started %s after the kill: %v",
			len(others), s.ID, s.Start.Sub(killed).Round(time.Millisecond), s.Err)
	}
	if d, limit := revoked.Sub(killed), harness.RevokeBound(callLease); d > limit {
		t.Errorf("k3's lease revoked %s after the kill, want within %s (its TTL %s, etcd's check, the watch)", d, limit, callLease)
	}
	if afterLease > harness.WatchBound {
		t.Errorf("k3's entities answered again %s after its lease was revoked, want within %s (moved by the watches)", afterLease, harness.WatchBound)
	}
}

// callRecorderURL is the recorder's URL for runner id's http: handler: the
// recorder knows from it which runner ran an entity call.
func callRecorderURL(rec *recorder, id string) string { return rec.URL() + "?runner=" + id }

// TestCallsCutRunnerRefusesAndNeverOverlaps: entity calls and tasks of a
// few entities run through the http: handler into the recorder while one
// of 3 runners is cut from etcd. Once detached, the cut runner refuses the
// calls it is given (its own HTTP path, pinned to it, answers 503
// "refused", and it starts no run), its entities answer on the successor,
// and the audit finds no two runs of one entity at once, calls and tasks
// together, across the runners.
func TestCallsCutRunnerRefusesAndNeverOverlaps(t *testing.T) {
	rec := newRecorder(t)
	c, rs := startCallCluster(t, func(id string) []string {
		return []string{"--handler", "audit=http:" + callRecorderURL(rec, id)}
	}, "x1", "x2", "x3")
	victim := rs[2]
	var ents []string
	byOwner := c.entitiesOf("audit", numbered(64))
	ents = append(ents, byOwner["x3"][:3]...)
	ents = append(ents, byOwner["x1"][0])
	onVictim := func(id string) bool { return slices.Contains(byOwner["x3"][:3], id) }

	cli := c.callClient()
	tasks := c.taskClient()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var refs []string
	submit := func() {
		for i := range 8 {
			tk, _, err := tasks.Submit(ctx, task.SubmitRequest{Type: "audit", Entity: ents[i%len(ents)], MaxAttempts: 10,
				Input: json.RawMessage(`{"ms":200}`)})
			if err != nil {
				t.Fatal(err)
			}
			refs = append(refs, tk.Ref())
		}
	}
	load := harness.StartCallLoad(8, ents, 10*time.Second, func(ctx context.Context, id string) ([]byte, error) {
		return cli.Call(ctx, "audit", id, []byte(`{"ms":20}`))
	})
	defer load.Stop()
	submit()
	isCall := func(x auditExec) bool { return strings.HasPrefix(x.TaskID, "call-") }
	testenv.WaitFor(t, "calls run on x3", 20*time.Second, func() bool {
		n := 0
		for _, x := range rec.All() {
			if x.Runner == "x3" && isCall(x) {
				n++
			}
		}
		return n >= 20
	})

	victim.proxy.SetMode(testenv.Blackhole)
	cut := time.Now()
	submit()
	testenv.WaitFor(t, "x3 detached", 10*time.Second, func() bool {
		st, err := victim.status()
		return err == nil && !st.Attached
	})
	detached := time.Now()
	hc := &http.Client{Timeout: 10 * time.Second}
	code, body, err := postCall(hc, victim.admin, "audit", byOwner["x3"][0], "?timeout=1s", []byte(`{"ms":1}`))
	var answer struct{ Code string }
	json.Unmarshal(body, &answer)
	if err != nil || code != http.StatusServiceUnavailable || answer.Code != "refused" {
		t.Errorf("a call through the detached x3: %d %s %v, want 503 refused", code, body, err)
	}
	moved := waitShardsMoved(t, c, []string{"x1", "x2"})
	submit()
	testenv.WaitFor(t, "x3's entities answering on the successors", 20*time.Second, func() bool {
		return load.Count(func(s harness.CallSample) bool { return s.Err == nil && onVictim(s.ID) && s.Start.After(moved) }) >= 30
	})
	calls := load.Stop()
	if left := waitTerminal(ctx, tasks, refs, 60*time.Second); len(left) > 0 {
		t.Fatalf("%d tasks not terminal, e.g. %s", len(left), left[0])
	}

	execs := rec.all()
	runs := map[string]int{}
	for _, x := range execs {
		kind := "task"
		if isCall(x) {
			kind = "call"
		}
		runs[x.Runner+" "+kind]++
		if x.Runner == "x3" && x.Start.After(detached) {
			t.Errorf("x3 started %s %s on %s at %s, after it was seen detached (%s)", kind, x.TaskID, x.Entity,
				x.Start.Format("05.000"), detached.Format("05.000"))
		}
	}
	errs := map[string]int{}
	for _, s := range calls {
		if s.Err != nil {
			errs[callErrorKind(s.Err)]++
		}
	}
	t.Logf("cut x3: detached %s after the cut, its shards moved %s after; runs %v; %d calls, errors %v",
		detached.Sub(cut).Round(time.Millisecond), moved.Sub(cut).Round(time.Millisecond), runs, len(calls), errs)
	// 5 ms: see auditLag (a cancelled call's end reaches the recorder
	// after the runner has moved on).
	rep := auditLag(t, tasks, execs, nil, refs, nil, 5*time.Millisecond)
	t.Logf("audit: %d executions (%d cancelled), %d tasks completed, %d failed; %d overlapping executions of one entity",
		rep.executions, rep.cancelled, rep.completed, rep.failed, len(rep.overlaps))
	rep.check(t)
}

// callErrorKind names a call error for the logs.
func callErrorKind(err error) string {
	switch {
	case errors.Is(err, messaging.ErrOutcomeUnknown):
		return "unknown"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, messaging.ErrNoOwner):
		return "no-owner"
	case errors.Is(err, messaging.ErrHandler):
		// A call running on a runner that detaches is cancelled with the
		// detach as its cause, which the http: handler returns.
		return "handler"
	}
	return "other: " + err.Error()
}

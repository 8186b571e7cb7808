package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/state"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
)

// The proof of the call outcome contract with `tenure run`
// processes: calls that add to durable counters enter through every
// runner's HTTP path while S3 is slow (every PUT held up to 120 ms, so
// that saves are in flight) and one runner is cut from etcd until it
// detaches, one is SIGKILLed and one SIGTERMed (each started again). Each
// add is a distinct power of four, so the stored total says, digit by
// digit in base 4, how many times each add was applied. Every answer is
// then held against the stored state, from outside:
//
//   - an answer labelled "applied": "no" is absent from the state;
//   - a 200 is in the state exactly once (no acknowledged add lost);
//   - no add is applied twice, and none that was never sent appears;
//   - no deadline answer (deadline_exceeded, not_started, or refused /
//     no_owner, which end at the deadline) arrives before the caller's
//     deadline;
//   - the status matches the label (503 only for "no", 504 only for
//     "unknown", application errors 4xx and "yes").

const (
	outcomeCounters = 48
	outcomeSlots    = 15 // 4^14 < runner.MaxCounterAdd
	outcomePace     = 12 * time.Millisecond
	outcomeS3Delay  = 120 * time.Millisecond
)

// outcomeTimeouts are the callers' deadlines (?timeout=), in turn: short
// ones expire at the owner or in a failover, long ones wait it out.
var outcomeTimeouts = []time.Duration{250 * time.Millisecond, time.Second, 4 * time.Second}

// outcomeOp is one call and what its caller saw.
type outcomeOp struct {
	counter string
	slot    int // the add is 4^slot; -1: an add over the bound (an application error)
	runner  string
	timeout time.Duration

	start, end time.Time
	status     int // 0: no HTTP answer (transport error)
	body       []byte
	transport  error
	answer     struct {
		Code    string          `json:"code"`
		Applied string          `json:"applied"`
		AppCode string          `json:"app_code"`
		Details json.RawMessage `json:"details"`
		Total   *int64          `json:"total"`
	}
}

func (o *outcomeOp) String() string {
	what := "add 4^" + strconv.Itoa(o.slot)
	if o.slot < 0 {
		what = "add over the bound"
	}
	ans := fmt.Sprintf("%d %s", o.status, strings.TrimSpace(string(o.body)))
	if o.transport != nil {
		ans = "transport error: " + o.transport.Error()
	}
	return fmt.Sprintf("%s on %s via %s (timeout %s, answered after %s): %s", what, o.counter, o.runner, o.timeout,
		o.end.Sub(o.start).Round(time.Millisecond), ans)
}

// add is the op's input.
func (o *outcomeOp) add() int64 {
	if o.slot < 0 {
		return 2 * runner.MaxCounterAdd
	}
	return 1 << (2 * o.slot)
}

// digit is how many times the add of slot is in total.
func digit(total int64, slot int) int64 { return (total >> (2 * slot)) & 3 }

func TestCallOutcomesUnderFaults(t *testing.T) {
	c := newCluster(t)
	cfg, err := runner.Load(c.cfgPath, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.s3EP = cfg.S3.Endpoint
	ids := []string{"o1", "o2", "o3"}
	var rs []*runnerProc
	for _, id := range ids {
		rs = append(rs, c.run(id, fastRunner...))
	}
	c.waitAllOwned(ids, 60*time.Second)
	c.waitSettled(rs, 1, 30*time.Second)
	for _, r := range rs {
		r.s3.slowDown(http.MethodPut, outcomeS3Delay)
	}

	// The ops: every slot of every counter once, in a shuffled order, and
	// an add over the bound every 20th op.
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 24))
	var ops []*outcomeOp
	for i := range outcomeCounters {
		for slot := range outcomeSlots {
			ops = append(ops, &outcomeOp{counter: fmt.Sprintf("oc%d", i), slot: slot})
		}
	}
	rnd.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
	for i := 0; i < len(ops); i += 20 {
		ops = slices.Insert(ops, i, &outcomeOp{counter: fmt.Sprintf("oc%d", rnd.IntN(outcomeCounters)), slot: -1})
	}
	for i, o := range ops {
		o.timeout = outcomeTimeouts[i%len(outcomeTimeouts)]
	}

	// up says which runners take requests; the test takes one out just
	// before it signals it, so that (bar a race) no request is sent to a
	// process that is not there.
	var upMu sync.Mutex
	up := map[string]bool{"o1": true, "o2": true, "o3": true}
	setUp := func(id string, v bool) {
		upMu.Lock()
		defer upMu.Unlock()
		up[id] = v
	}
	pickRunner := func(i int) *runnerProc {
		upMu.Lock()
		defer upMu.Unlock()
		for k := range len(rs) {
			if r := rs[(i+k)%len(rs)]; up[r.id] {
				return r
			}
		}
		return rs[i%len(rs)]
	}

	load := startPacedLoad(len(ops), 32, outcomePace, func(i int) {
		o := ops[i]
		r := pickRunner(i)
		o.runner = r.id
		// The caller's own bound, from outside: far past its deadline.
		hc := &http.Client{Timeout: o.timeout + 15*time.Second}
		o.start = time.Now()
		o.status, o.body, o.transport = postCall(hc, r.admin, counterType, o.counter,
			"?timeout="+o.timeout.String(), []byte(fmt.Sprintf(`{"add":%d}`, o.add())))
		o.end = time.Now()
		if o.transport == nil {
			if err := json.Unmarshal(o.body, &o.answer); err != nil {
				t.Errorf("%s: the body is not JSON: %v", o, err)
			}
		}
	})
	progress := func(n int, what string) { load.await(t, n, what, 90*time.Second) }
	others := func(r *runnerProc) []string {
		var out []string
		for _, id := range ids {
			if id != r.id {
				out = append(out, id)
			}
		}
		return out
	}

	// Cut from etcd at a fifth of the load, until it has detached and its
	// shards have moved; then healed.
	progress(len(ops)/5, "the partition")
	cut := rs[2]
	t.Logf("partition of %s at %s", cut.id, load.at())
	cut.proxy.SetMode(testenv.Blackhole)
	testenv.WaitFor(t, cut.id+" detached", 20*time.Second, func() bool {
		st, err := cut.status()
		return err == nil && !st.Attached
	})
	c.waitAllOwned(others(cut), 30*time.Second)
	cut.proxy.SetMode(testenv.Pass)

	// SIGKILL at two fifths; started again once its shards have moved.
	progress(2*len(ops)/5, "the SIGKILL")
	kill := rs[0]
	t.Logf("SIGKILL of %s at %s", kill.id, load.at())
	setUp(kill.id, false)
	kill.signal(t, syscall.SIGKILL)
	kill.wait(t, 10*time.Second)
	c.waitAllOwned(others(kill), 20*time.Second)
	c.restart(kill)
	c.waitAllOwned(ids, 30*time.Second)
	setUp(kill.id, true)

	// SIGTERM at three fifths; started again once it has exited.
	progress(3*len(ops)/5, "the SIGTERM")
	term := rs[1]
	t.Logf("SIGTERM of %s at %s", term.id, load.at())
	setUp(term.id, false)
	term.signal(t, syscall.SIGTERM)
	if code := term.wait(t, 20*time.Second); code != 0 {
		t.Errorf("%s exited %d after SIGTERM, want 0", term.id, code)
	}
	c.restart(term)
	setUp(term.id, true)

	load.wait()
	t.Logf("load done: %s", load.at())
	for _, r := range rs {
		r.s3.slowDown("", 0)
	}
	c.waitSettled(rs, 1, 60*time.Second)

	// The stored totals, from S3, and what a call reads.
	st := c.stateStore()
	cli := c.callClient()
	totals := map[string]int64{}
	for i := range outcomeCounters {
		id := fmt.Sprintf("oc%d", i)
		totals[id] = storedTotal(t, c, st, id)
		if read := readCounter(t, cli, id); read != totals[id] {
			t.Errorf("counter %s: a call reads %d, its state object holds %d", id, read, totals[id])
		}
	}

	// Every op against the state.
	var violations []string
	violate := func(o *outcomeOp, format string, args ...any) {
		violations = append(violations, fmt.Sprintf(format, args...)+": "+o.String())
	}
	counts := map[string]int{}
	examples := map[string]string{} // an op of each kind of answer, for the log
	sent := map[string]map[int]bool{}
	for _, o := range ops {
		if sent[o.counter] == nil {
			sent[o.counter] = map[int]bool{}
		}
		if o.slot >= 0 {
			sent[o.counter][o.slot] = true
		}
		if o.transport != nil {
			counts["transport error"]++
			if examples["transport "+o.runner] == "" {
				examples["transport "+o.runner] = o.String()
			}
			continue
		}
		a := o.answer
		elapsed := o.end.Sub(o.start)
		switch {
		case o.status == http.StatusOK:
			counts["ok"]++
		case a.Applied == "no":
			counts["not applied"]++
		case a.Applied == "unknown":
			counts["unknown"]++
		case a.Applied == "yes":
			counts["application error"]++
		default:
			violate(o, "an error without applied no|unknown|yes")
		}
		if o.status != http.StatusOK {
			k := fmt.Sprintf("%d %s", o.status, a.Code)
			counts[k]++
			if examples[k] == "" {
				examples[k] = o.String()
			}
		}
		// The label and the status agree.
		switch {
		case o.status == http.StatusServiceUnavailable && a.Applied != "no":
			violate(o, "503 not labelled applied no")
		case o.status == http.StatusGatewayTimeout && a.Applied != "unknown":
			violate(o, "504 not labelled applied unknown")
		case a.Code == "application" && (a.Applied != "yes" || o.status < 400 || o.status > 499):
			violate(o, "an application error not a 4xx labelled applied yes")
		}
		// A deadline answer comes at the caller's deadline, never before.
		switch a.Code {
		case "deadline_exceeded", "not_started", "no_owner", "refused":
			if elapsed < o.timeout {
				violate(o, "a deadline answer %s before the caller's deadline", o.timeout-elapsed)
			}
		}
		if o.slot < 0 {
			if a.Code != "application" && o.status != http.StatusOK && a.Applied != "no" && a.Applied != "unknown" {
				violate(o, "an add over the bound answered otherwise than an application error")
			}
			if o.status == http.StatusOK {
				violate(o, "an add over the bound succeeded")
			}
			if a.Code == "application" && a.AppCode != runner.CounterOutOfRange {
				violate(o, "the application error's code is not %s", runner.CounterOutOfRange)
			}
			continue
		}
		n := digit(totals[o.counter], o.slot)
		switch {
		case n > 1:
			violate(o, "applied %d times", n)
		case o.status == http.StatusOK && n != 1:
			violate(o, "acknowledged, and not in the stored total")
		case o.status == http.StatusOK && (a.Total == nil || digit(*a.Total, o.slot) != 1):
			violate(o, "acknowledged with a total that does not hold it")
		case a.Applied == "no" && n != 0:
			violate(o, "labelled not applied, and in the stored total")
		case a.Code == "application":
			violate(o, "an add in bounds answered with an application error")
		}
	}
	// Nothing applied that was never sent, or beyond the slots.
	for id, total := range totals {
		if total>>(2*outcomeSlots) != 0 {
			t.Errorf("counter %s: total %d holds adds no call made", id, total)
		}
		for slot := range outcomeSlots {
			if digit(total, slot) != 0 && !sent[id][slot] {
				t.Errorf("counter %s: the add 4^%d is in the total and no call made it", id, slot)
			}
		}
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	t.Logf("%d calls through 3 runners (PUTs held up to %s; a partition, a SIGKILL, a SIGTERM): %s; %d violations",
		len(ops), outcomeS3Delay, strings.Join(parts, ", "), len(violations))
	for _, k := range slices.Sorted(maps.Keys(examples)) {
		t.Logf("e.g. %s", examples[k])
	}
	for i, v := range violations {
		if i == 20 {
			t.Errorf("… and %d more", len(violations)-20)
			break
		}
		t.Error(v)
	}
	if counts["ok"] == 0 || counts["not applied"] == 0 || counts["application error"] == 0 {
		t.Errorf("the load saw too few kinds of answer to prove anything: %v", counts)
	}
}

// storedTotal reads id's state object in S3 (0 when none: no add of it
// was ever applied).
func storedTotal(t *testing.T, c *cluster, st *state.Store, id string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	env, _, err := st.Get(ctx, task.ShardOf(storage.DefaultGroup, c.Meta.Shards, counterType, id, ""), counterType, id)
	if errors.Is(err, state.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatalf("state of counter %s: %v", id, err)
	}
	var s struct {
		Total int64 `json:"total"`
	}
	if err := json.Unmarshal(env.State, &s); err != nil {
		t.Fatalf("state of counter %s: %q: %v", id, env.State, err)
	}
	return s.Total
}

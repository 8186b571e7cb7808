package integration

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/s3count"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
	s3store "github.com/tenurehq/tenure/storage/s3"
)

// The soak's accounting, checked without a cluster: a task client on a
// bucket of the shared S3 server, directly or through a fault proxy, and
// task objects written by hand.

const accountingShards = 4

// accountingClient returns a task client on a fresh bucket (through a
// counting proxy injecting faults when opts say so), a direct one on the
// same bucket, and the direct object store.
func accountingClient(t *testing.T, opts ...s3count.Option) (viaProxy, direct *task.Client, obj *s3store.Store) {
	t.Helper()
	s3 := testenv.SharedS3(t)
	bucket := s3.Bucket(t)
	ak, sk := s3.Credentials()
	open := func(endpoint string) (*task.Client, *s3store.Store) {
		cc := s3store.DefaultClientConfig()
		cc.Endpoint, cc.Region, cc.UsePathStyle, cc.AccessKey, cc.SecretKey = endpoint, s3.Region(), true, ak, sk
		cc.MaxBackoff = 50 * time.Millisecond // the SDK retries fast: the test waits for them
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		client, err := s3store.NewClient(ctx, cc)
		if err != nil {
			t.Fatal(err)
		}
		st, err := s3store.New(client, bucket,
			s3store.WithPrefix("tenure/acct/"), s3store.WithRequestTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		tc, err := task.NewClient(task.NewStore(st), task.ClientConfig{Shards: accountingShards})
		if err != nil {
			t.Fatal(err)
		}
		return tc, st
	}
	p, err := s3count.New(s3.Endpoint(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	viaProxy, _ = open(p.URL())
	direct, obj = open(s3.Endpoint())
	return viaProxy, direct, obj
}

// TestLedgerAccountsForAmbiguousSubmits: a submit whose task write
// happened but whose answer was lost, and one whose pointer write failed,
// both return an error. The ledger resolves them by id — the first task
// exists and, never run here, is reported lost; the second was not
// accepted. The accounting before the ledger (only the submits that
// returned no error) saw neither: its audit finds nothing. A task that
// appears later under a rejected id is reported too.
func TestLedgerAccountsForAmbiguousSubmits(t *testing.T) {
	faults := func(r s3count.Request) s3count.Fault {
		switch {
		case r.Op == s3count.OpCreate && strings.Contains(r.Path, "/tasks/"):
			return s3count.DropReply // every attempt: the write happens, no answer
		case r.Op == s3count.OpPut && strings.Contains(r.Path, "/ready/") && strings.Contains(r.Path, "fail-me"):
			return s3count.Reset
		}
		return s3count.Forward
	}
	viaProxy, direct, _ := accountingClient(t, s3count.WithFaults(faults))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	book := newLedger(accountingShards)
	if err := book.submit(ctx, viaProxy, task.SubmitRequest{Type: "audit", Entity: "lost-answer"}); err == nil {
		t.Fatal("submit with the task write's answer dropped: no error")
	}
	// The pointer key holds the task id: fail that one's pointer by id.
	failing := task.SubmitRequest{Type: "audit", Entity: "fail-me", ID: "fail-me-" + task.NewID()}
	if err := book.submit(ctx, viaProxy, failing); err == nil {
		t.Fatal("submit with its pointer write failing: no error")
	}
	rejectedRef := task.Ref(task.ShardOf(storage.DefaultGroup, accountingShards, failing.Type, failing.Entity, failing.ID), failing.ID)

	if old := audit(t, direct, nil, nil, book.clean(), nil); len(old.lost) != 0 {
		t.Fatalf("the accounting without the ambiguous submits found %v", old.lost)
	}
	if err := book.resolve(ctx, direct, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	c := book.counts()
	if c.submits != 2 || c.clean != 0 || c.ambiguous != 2 || c.existed != 1 || c.notAccepted != 1 || c.unresolved != 0 {
		t.Fatalf("ledger counts %+v, want 2 ambiguous: 1 existed, 1 not accepted", c)
	}
	accepted, rejected := book.accepted()
	if len(accepted) != 1 || !slices.Equal(rejected, []string{rejectedRef}) {
		t.Fatalf("accepted %v, rejected %v", accepted, rejected)
	}
	rep := audit(t, direct, nil, nil, accepted, rejected)
	if len(rep.lost) != 1 || !strings.HasPrefix(rep.lost[0], accepted[0]) || len(rep.phantoms) != 0 {
		t.Fatalf("audit with the ledger: lost %v, phantoms %v; want the existing ambiguous task lost, no phantom", rep.lost, rep.phantoms)
	}
	// The rejected id turns up after all: a phantom.
	if _, _, err := direct.Submit(ctx, failing); err != nil {
		t.Fatal(err)
	}
	if rep := audit(t, direct, nil, nil, accepted, rejected); len(rep.phantoms) != 1 {
		t.Fatalf("phantoms %v, want the rejected submit that now exists", rep.phantoms)
	}
}

// TestAuditReadsHistories: the audit reads each task's whole history, not
// only its final status: a completed task's history must hold exactly one
// completed event, as its last event, made by a run the recorder saw
// finish. Only the double completion was caught by the audit before.
func TestAuditReadsHistories(t *testing.T) {
	_, direct, obj := accountingClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ev := func(event, runner string, attempt int) task.Transition {
		return task.Transition{At: time.Now().UTC(), Event: event, Runner: runner, Attempt: attempt}
	}
	var runs []auditExec
	write := func(status task.Status, history ...task.Transition) string {
		t.Helper()
		tk, _, err := direct.Submit(ctx, task.SubmitRequest{Type: "audit"})
		if err != nil {
			t.Fatal(err)
		}
		tk.Status, tk.Attempt, tk.History = status, 1, append(tk.History, history...)
		b, err := json.Marshal(tk)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := obj.Put(ctx, tk.Key(), b); err != nil {
			t.Fatal(err)
		}
		// The recorder saw r1's attempt 1 of every task finish, and r2's
		// attempt 1 cancelled.
		now := time.Now()
		runs = append(runs, auditExec{TaskID: tk.ID, Runner: "r1", Attempt: 1, Start: now, End: now},
			auditExec{TaskID: tk.ID, Runner: "r2", Attempt: 1, Start: now, End: now, CancelledAt: now, Err: context.Canceled})
		return tk.Ref()
	}
	claimed := ev(task.EventClaimed, "r1", 1)
	good := write(task.Completed, claimed, ev(task.EventCompleted, "r1", 1))
	twice := write(task.Completed, claimed, ev(task.EventCompleted, "r1", 1), ev(task.EventCompleted, "r1", 1))
	after := write(task.Completed, claimed, ev(task.EventCompleted, "r1", 1), ev(task.EventClaimed, "r2", 2))
	silent := write(task.Completed, claimed)
	undone := write(task.Failed, claimed, ev(task.EventCompleted, "r1", 1), ev(task.EventFailed, "r1", 1))
	unrecorded := write(task.Completed, ev(task.EventClaimed, "r2", 1), ev(task.EventCompleted, "r2", 1))
	refs := []string{good, twice, after, silent, undone, unrecorded}

	rep := audit(t, direct, runs, nil, refs, nil)
	has := func(list []string, ref string) bool {
		return slices.ContainsFunc(list, func(s string) bool { return strings.HasPrefix(s, ref) })
	}
	for _, c := range []struct {
		name string
		list []string
		refs []string
	}{
		{"completed twice", rep.completedTwice, []string{twice}},
		{"history anomalies", rep.historyAnomalies, []string{after, silent, undone}},
		{"completions without a recorded run", rep.unrecordedCompletions, []string{unrecorded}},
	} {
		if len(c.list) != len(c.refs) {
			t.Errorf("%s: %v, want exactly %v", c.name, c.list, c.refs)
		}
		for _, ref := range c.refs {
			if !has(c.list, ref) {
				t.Errorf("%s: %v, want %s among them", c.name, c.list, ref)
			}
		}
	}
	if has(rep.completedTwice, good) || has(rep.historyAnomalies, good) || has(rep.unrecordedCompletions, good) || len(rep.lost) != 0 {
		t.Errorf("the consistent task was reported: %+v", rep)
	}
	if rep.completed != 5 || rep.failed != 1 {
		t.Errorf("completed %d, failed %d; want 5 and 1", rep.completed, rep.failed)
	}
}

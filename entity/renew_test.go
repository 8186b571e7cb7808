package entity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/storage"
)

// TestRenewalKeepsClaimAlive: a task running for more than three task
// leases stays claimed by its runner, and the lease in its S3 object, read
// by the test, moves forward and never falls behind the S3 clock; it then
// completes after one execution.
func TestRenewalKeepsClaimAlive(t *testing.T) {
	e := newEnv(t, 1)
	e.start("renewer", e.standard)
	e.waitOwned(10 * time.Second)
	runFor := 3*e.ecfg.TaskLease + 2*time.Second
	tk := e.submit(task.SubmitRequest{Type: "job", Input: input(sleepInput{MS: int(runFor / time.Millisecond)})})
	testenv.WaitFor(t, "the task to run", 10*time.Second, func() bool { return e.rec.Starts() == 1 })

	var first *task.Claim
	var leases []time.Time
	ctx := ctxFor(t, time.Minute)
	for {
		got, _, err := e.tasks.Load(ctx, tk.Shard, tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != task.Running {
			if got.Status != task.Completed {
				t.Fatalf("task ended %s: %s", got.Status, got.Error)
			}
			break
		}
		now, err := e.tasks.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c := got.Claim
		if first == nil {
			first = c
		}
		if c.RunnerID != first.RunnerID || c.Epoch != first.Epoch || !c.ClaimedAt.Equal(first.ClaimedAt) || got.Attempt != 1 {
			t.Fatalf("the claim changed while the task ran: %+v then %+v (attempt %d)", first, c, got.Attempt)
		}
		if !c.LeaseExpiresAt.After(now.Latest()) {
			t.Fatalf("the claim's lease %s fell behind the S3 clock %s", c.LeaseExpiresAt.Format(time.RFC3339Nano), now.Now.Format(time.RFC3339Nano))
		}
		if n := len(leases); n == 0 || !c.LeaseExpiresAt.Equal(leases[n-1]) {
			leases = append(leases, c.LeaseExpiresAt)
		}
		time.Sleep(200 * time.Millisecond) // sampling period, not synchronisation
	}
	for i := 1; i < len(leases); i++ {
		if !leases[i].After(leases[i-1]) {
			t.Fatalf("the lease moved back: %v", leases)
		}
	}
	// A renewal every TaskLease/3 (or sooner): at least 3 per lease.
	if want := int(runFor / e.ecfg.TaskLease * 3); len(leases) < want {
		t.Fatalf("the lease moved %d times in %s; want at least %d", len(leases)-1, runFor, want)
	}
	t.Logf("the lease moved %d times in %s: %s … %s", len(leases)-1, runFor,
		leases[0].Format("05.000"), leases[len(leases)-1].Format("05.000"))
	final := e.final(tk.Ref(), 10*time.Second)
	if final.Attempt != 1 || len(e.rec.All()) != 1 {
		t.Fatalf("attempt %d, %d executions; want 1 and 1", final.Attempt, len(e.rec.All()))
	}
}

// TestRenewalRefusedCancelsHandler: another writer takes the task over
// while it runs (as a new shard owner would); the runner's next renewal is
// refused (412), it re-reads the task, finds the claim gone and cancels its
// handler; its outcome is fenced off and the other writer's claim stays.
func TestRenewalRefusedCancelsHandler(t *testing.T) {
	e := newEnv(t, 1)
	n := e.start("loser", e.standard)
	e.waitOwned(10 * time.Second)
	tk := e.submit(task.SubmitRequest{Type: "job", Input: input(sleepInput{Block: true})})
	testenv.WaitFor(t, "the task to run", 10*time.Second, func() bool { return e.rec.Starts() == 1 })
	ctx := ctxFor(t, 30*time.Second)
	cur, etag, err := e.tasks.Load(ctx, tk.Shard, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	now, err := e.tasks.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	intruder := task.ClaimInfo{RunnerID: "intruder", Epoch: cur.Claim.Epoch + 1, LeaseID: 42, Lease: time.Hour}
	if err := cur.TakeOver(now.Earliest(), intruder, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.tasks.Write(ctx, cur, etag); err != nil {
		t.Fatal(err)
	}
	taken := time.Now()
	testenv.WaitFor(t, "the handler to be cancelled", 2*e.ecfg.TaskLease, func() bool { return e.rec.All()[0].Ctx.Err() != nil })
	x := e.rec.All()[0]
	if cause := context.Cause(x.Ctx); !errors.Is(cause, errClaimLost) {
		t.Fatalf("handler cancelled with %v, want %v", cause, errClaimLost)
	}
	t.Logf("handler cancelled %s after the takeover (renewal every %s)", time.Since(taken).Round(time.Millisecond), e.ecfg.TaskLease/3)
	testenv.WaitFor(t, "the outcome to be fenced off", 10*time.Second, func() bool {
		return testutil.ToFloat64(n.host.metrics.attempts.WithLabelValues("job", outcomeFenced)) == 1
	})
	after, _, err := e.tasks.Load(ctx, tk.Shard, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if after.Status != task.Running || after.Claim.RunnerID != "intruder" || after.Rev != cur.Rev {
		t.Fatalf("the runner wrote over the new claim: %s claim %+v rev %d (the takeover wrote rev %d)", after.Status, after.Claim, after.Rev, cur.Rev)
	}
}

// unreachable fails every call of a runner's object store once cut, as a
// network partition between the runner and S3 would: requests and the S3
// clock both.
type unreachable struct {
	storage.ObjectStore
	cut atomic.Bool
}

var errUnreachable = fmt.Errorf("injected partition: %w", storage.ErrUnavailable)

func (u *unreachable) Replace(ctx context.Context, key string, body []byte, ifMatch string) (string, error) {
	if u.cut.Load() {
		return "", errUnreachable
	}
	return u.ObjectStore.Replace(ctx, key, body, ifMatch)
}

func (u *unreachable) Get(ctx context.Context, key string) (storage.Object, error) {
	if u.cut.Load() {
		return storage.Object{}, errUnreachable
	}
	return u.ObjectStore.Get(ctx, key)
}

func (u *unreachable) ServerTime(ctx context.Context) (storage.ServerTime, error) {
	if u.cut.Load() {
		return storage.ServerTime{}, errUnreachable
	}
	return u.ObjectStore.ServerTime(ctx)
}

// TestRenewalFailuresCancelBeforeLapse: the runner loses S3 (requests and
// its clock) while a task runs. Its renewals fail until the claim nears
// expiry, and the handler is cancelled before the claim's lease, as stored
// in S3 and compared with the S3 clock by the test, has lapsed.
func TestRenewalFailuresCancelBeforeLapse(t *testing.T) {
	e := newEnv(t, 1)
	cut := &unreachable{}
	e.wrap = func(_ string, s storage.ObjectStore) storage.ObjectStore {
		cut.ObjectStore = s
		return cut
	}
	type seen struct {
		cause  error
		s3Time storage.ServerTime
	}
	var mu sync.Mutex
	var got *seen
	e.start("cut", func(n *node, h *Host) {
		if err := h.RegisterFunc("long", func(ctx context.Context, tk *task.Task) (json.RawMessage, error) {
			<-ctx.Done()
			// The moment the handler learns of it, on the S3 clock (read
			// through the test's own, healthy, connection).
			now, err := e.tasks.Now(context.Background())
			if err != nil {
				return nil, err
			}
			mu.Lock()
			got = &seen{context.Cause(ctx), now}
			mu.Unlock()
			return nil, context.Cause(ctx)
		}); err != nil {
			t.Fatal(err)
		}
	})
	e.waitOwned(10 * time.Second)
	tk := e.submit(task.SubmitRequest{Type: "long", MaxAttempts: 1})
	ctx := ctxFor(t, 30*time.Second)
	var claim *task.Claim
	testenv.WaitFor(t, "the task to be claimed", 10*time.Second, func() bool {
		cur, _, err := e.tasks.Load(ctx, tk.Shard, tk.ID)
		if err == nil && cur.Status == task.Running {
			claim = cur.Claim
			return true
		}
		return false
	})
	cut.cut.Store(true)
	// Renewals that happened between the read and the cut only push the
	// lease further: read the lease that stands from S3 after the fact.
	testenv.WaitFor(t, "the handler to be cancelled", 3*e.ecfg.TaskLease, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got != nil
	})
	stored, _, err := e.tasks.Load(ctx, tk.Shard, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Claim == nil || stored.Claim.ClaimedAt != claim.ClaimedAt {
		t.Fatalf("the claim changed: %+v", stored.Claim)
	}
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(got.cause, errLeaseExpiring) {
		t.Fatalf("handler cancelled with %v, want %v", got.cause, errLeaseExpiring)
	}
	left := stored.Claim.LeaseExpiresAt.Sub(got.s3Time.Latest())
	if left <= 0 {
		t.Fatalf("the handler learnt of it %s after the claim's lease lapsed (S3 time)", -left)
	}
	t.Logf("handler cancelled with %s of the claim's lease left (S3 time, conservatively)", left.Round(time.Millisecond))
	cut.cut.Store(false)
}

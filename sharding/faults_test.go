package sharding

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/storage"

	"github.com/tenurehq/tenure/internal/testenv"
)

// faultyStore wraps a real runner store and, while failing, answers the
// runner list, the membership listing (runners and locks: the safety
// pass's read) and every lock call with ErrUnavailable (keep-alives and
// the membership stream go on: they are the real ones). It logs the calls
// it sees.
type faultyStore struct {
	storage.RunnerStore
	mu      sync.Mutex
	failing bool
	ops     []opRecord
}

type opRecord struct {
	op      string
	at      time.Time
	failing bool
}

var errInjected = fmt.Errorf("%w: injected fault", storage.ErrUnavailable)

func (f *faultyStore) record(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, opRecord{op: op, at: time.Now(), failing: f.failing})
	if f.failing {
		return errInjected
	}
	return nil
}

func (f *faultyStore) setFailing(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing = v
}

func (f *faultyStore) opsSince(t time.Time) []opRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []opRecord
	for _, o := range f.ops {
		if !o.at.Before(t) {
			out = append(out, o)
		}
	}
	return out
}

func (f *faultyStore) Runners(ctx context.Context) ([]storage.RunnerInfo, int64, error) {
	if err := f.record("runners"); err != nil {
		return nil, 0, err
	}
	return f.RunnerStore.Runners(ctx)
}

func (f *faultyStore) Membership(ctx context.Context) (storage.MembershipBatch, error) {
	if err := f.record("membership"); err != nil {
		return storage.MembershipBatch{}, err
	}
	return f.RunnerStore.Membership(ctx)
}

func (f *faultyStore) Register(ctx context.Context, r storage.RunnerInfo, ttl time.Duration) (storage.Session, error) {
	ss, err := f.RunnerStore.Register(ctx, r, ttl)
	if err != nil {
		return nil, err
	}
	return &faultySession{Session: ss, f: f}, nil
}

type faultySession struct {
	storage.Session
	f *faultyStore
}

func (s *faultySession) AcquireShards(ctx context.Context, sh []storage.ShardID) ([]storage.AcquireResult, error) {
	if err := s.f.record("acquire"); err != nil {
		return nil, err
	}
	return s.Session.AcquireShards(ctx, sh)
}

func (s *faultySession) VerifyShards(ctx context.Context, sh []storage.ShardID) ([]storage.VerifyResult, error) {
	if err := s.f.record("verify"); err != nil {
		return nil, err
	}
	return s.Session.VerifyShards(ctx, sh)
}

func (s *faultySession) ReleaseShard(ctx context.Context, sh storage.ShardID) error {
	if err := s.f.record("release"); err != nil {
		return err
	}
	return s.Session.ReleaseShard(ctx, sh)
}

// TestStorageErrorsDetach: storage errors unanswered for the grace detach the
// runner; while detached it makes no lock call and owns nothing; once the
// store answers again it re-attaches after the recovery window and
// re-verifies its locks before any shard resumes.
func TestStorageErrorsDetach(t *testing.T) {
	cfg := testConfig()
	c := newCluster(t, 4, cfg)
	var fs *faultyStore
	r := c.startWith("shaky", 1, func(s storage.RunnerStore) storage.RunnerStore {
		fs = &faultyStore{RunnerStore: s}
		return fs
	})
	c.waitConverged(c.members(), 10*time.Second)
	epochs := map[storage.ShardID]int64{}
	for _, o := range r.mgr.Owned() {
		epochs[o.Shard] = o.Epoch
	}

	failFrom := time.Now()
	fs.setFailing(true)
	testenv.WaitFor(t, "storage-error detachment", 5*time.Second, func() bool {
		return len(r.transitionsOf(detachment.Detached)) == 1
	})
	det := r.transitionsOf(detachment.Detached)[0]
	if det.Reason != detachment.ReasonStorageError {
		t.Fatalf("detached for %s, want %s", det.Reason, detachment.ReasonStorageError)
	}
	if took := det.At.Sub(failFrom); took < cfg.Detachment.StorageErrorGrace {
		t.Fatalf("detached %s after the first failure, before the %s grace", took, cfg.Detachment.StorageErrorGrace)
	}
	if st := r.mgr.Status(); st.Attached || len(st.Owned) != 0 {
		t.Fatalf("detached runner: attached=%v owned=%d", st.Attached, len(st.Owned))
	}
	// Stay detached a while: only probes may reach the store.
	time.Sleep(3 * cfg.ProbeInterval) // observation period, not synchronisation
	healAt := time.Now()
	for _, op := range fs.opsSince(det.At) {
		if op.op != "runners" {
			t.Fatalf("lock call %q at %v while detached", op.op, op.at)
		}
	}
	fs.setFailing(false)
	testenv.WaitFor(t, "re-attachment", 10*time.Second, func() bool {
		return len(r.transitionsOf(detachment.Attached)) == 2
	})
	att := r.transitionsOf(detachment.Attached)[1]
	// The recovery window runs from the last failure the runner saw, not
	// from the healing: a keep-alive answered after the last failed probe
	// and before the healing opens it (from the runner's view it has been
	// healthy since). The store's record of its last failed call bounds it
	// from outside.
	lastFail := det.At
	for _, op := range fs.opsSince(det.At) {
		if op.failing && op.at.After(lastFail) {
			lastFail = op.at
		}
	}
	if gap := att.At.Sub(lastFail); gap < cfg.Detachment.RecoverWindow {
		t.Fatalf("re-attached %s after the last failed store call (%s after healing), within the %s recovery window",
			gap, att.At.Sub(healAt), cfg.Detachment.RecoverWindow)
	}
	c.waitConverged(c.members(), 10*time.Second)
	var first string
	for _, op := range fs.opsSince(att.At) {
		if op.op == "verify" || op.op == "acquire" {
			first = op.op
			break
		}
	}
	if first != "verify" {
		t.Fatalf("first lock call after re-attaching was %q, want verify", first)
	}
	for _, o := range r.mgr.Owned() {
		if epochs[o.Shard] != o.Epoch {
			t.Fatalf("shard %s resumed at epoch %d, had %d: the kept lock was not re-verified", o.Shard, o.Epoch, epochs[o.Shard])
		}
	}
	if v := testutil.ToFloat64(r.mgr.metrics.detachments.WithLabelValues(string(detachment.ReasonStorageError))); v != 1 {
		t.Fatalf("detachments_total{storage-error} = %v", v)
	}
}

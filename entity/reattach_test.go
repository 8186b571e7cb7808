package entity

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
)

// TestDetachReattachUnderLoadLosesNothing: a runner is partitioned from
// etcd while tasks are being submitted and run — some claimed, some
// committing, some only woken — detaches, and re-attaches when the
// partition heals. Every task completes, soon: with reconciliation a long
// way off, only the re-attached ownerships' own listing and wake-ups can
// bring back what the detachment interrupted.
func TestDetachReattachUnderLoadLosesNothing(t *testing.T) {
	e := newEnv(t, 4)
	e.ecfg.ReconcileInterval = 10 * time.Minute
	e.holdLeaseOpen()
	n := e.start("solo", e.standard)
	e.waitOwned(10 * time.Second)

	const total, submitters = 300, 16
	var (
		mu        sync.Mutex
		refs      []string
		submitted atomic.Int64
		wg        sync.WaitGroup
	)
	for w := range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < total; i += submitters {
				req := task.SubmitRequest{Type: "job", Input: input(sleepInput{MS: 5})}
				if i%3 == 0 {
					req.Type, req.Entity = "counter", fmt.Sprintf("e%d", i%12)
				}
				var tk *task.Task
				for {
					var err error
					tk, _, err = e.client.Submit(ctxFor(t, 10*time.Second), req)
					if err == nil {
						break
					}
					if tk == nil {
						t.Error(err)
						return
					}
					req.ID = tk.ID // resubmit the same task (see Submit)
				}
				mu.Lock()
				refs = append(refs, tk.Ref())
				mu.Unlock()
				submitted.Add(1)
			}
		}()
	}
	testenv.WaitFor(t, "a third of the tasks to be submitted", 30*time.Second, func() bool { return submitted.Load() >= total/3 })
	n.proxy.SetMode(testenv.Blackhole)
	testenv.WaitFor(t, "the partitioned runner to detach", 10*time.Second, func() bool { return len(n.detaches()) > 0 })
	n.proxy.SetMode(testenv.Pass)
	testenv.WaitFor(t, "the runner to attach again", 20*time.Second, func() bool {
		return len(n.transitions.Of(detachment.Attached)) >= 2
	})
	wg.Wait()
	var unfinished []string
	for _, ref := range refs {
		tk, err := e.client.Wait(ctxFor(t, 20*time.Second), ref, 50*time.Millisecond)
		if err != nil || tk.Status != task.Completed {
			unfinished = append(unfinished, fmt.Sprintf("%s (%v, err %v)", ref, statusOf(tk), err))
		}
	}
	if len(unfinished) > 0 {
		t.Fatalf("%d of %d tasks did not complete after the runner re-attached: %v", len(unfinished), total, unfinished)
	}
	t.Logf("detached %d time(s), %d runs for %d tasks", len(n.detaches()), len(e.rec.All()), total)
}

func statusOf(tk *task.Task) string {
	if tk == nil {
		return "unknown"
	}
	return string(tk.Status)
}

package entity

import (
	"context"
	"sync"
	"time"
)

// How a shard executor's ownership ends: the manager says whether by a
// handoff or a loss (decide, awaitFate), the handlers get the interrupt
// timeout to return (awaitInterrupt, reportOverruns), and the shard's
// entities are stopped (stopEntities).

// decide records how the ownership ends, once: a handoff (ctx live while
// the lock is held) or a loss (nil ctx).
func (e *shardExec) decide(ctx context.Context, handoff bool) {
	e.fateOnce.Do(func() {
		if handoff {
			e.handoffCtx = ctx
		}
		close(e.fate)
	})
}

// waitStopped waits, up to ctx, for everything the ownership started to
// return: handlers, commits and OnStop hooks. It reports whether they all
// did; those still running are counted and named.
func (e *shardExec) waitStopped(ctx context.Context, why string) bool {
	select {
	case <-e.stopped:
		return true
	case <-ctx.Done():
	}
	e.reportOverruns(why)
	return false
}

// awaitInterrupt gives the handlers of an ended ownership the interrupt
// timeout to return, then counts and names those that did not.
func (e *shardExec) awaitInterrupt(why string) {
	ctx, cancel := context.WithTimeout(context.Background(), e.h.cfg.InterruptTimeout)
	defer cancel()
	if e.waitStopped(ctx, why) {
		return
	}
	start := time.Now()
	<-e.stopped
	e.h.log.Info("overrunning handlers of an ended ownership have returned", "shard", e.own.Shard.String(),
		"epoch", e.own.Epoch, "after", time.Since(start)+e.h.cfg.InterruptTimeout)
}

// reportOverruns counts and names the handlers still running after the
// wait that followed an interruption: they ignore their context.
func (e *shardExec) reportOverruns(why string) {
	e.mu.Lock()
	type overrun struct {
		ref, typ string
		running  time.Duration
	}
	var list []overrun
	for _, a := range e.inflight {
		t, _ := a.current()
		list = append(list, overrun{t.Ref(), t.Type, time.Since(a.started)})
	}
	for c := e.calls.head; c != nil; c = c.next {
		ref := "message " + c.msg.Type + "/" + c.msg.ID
		list = append(list, overrun{ref, c.msg.Type, time.Since(c.started)})
	}
	e.mu.Unlock()
	// Named before counted: whoever sees the count (an alert) finds the
	// names in the log.
	for _, o := range list {
		e.h.log.Warn("handler still running after the interrupt wait; it ignores its context",
			"shard", e.own.Shard.String(), "epoch", e.own.Epoch, "interrupted_by", why,
			"task", o.ref, "type", o.typ, "running_for", o.running.Round(time.Millisecond),
			"waited", e.h.cfg.InterruptTimeout)
	}
	e.h.metrics.stuck.Add(float64(len(list)))
}

// stopEntities stops every instance of the shard once its workers are
// done. In a planned release the hooks run under the handoff context, while
// the lock is still held: the successor sees what they wrote.
func (e *shardExec) stopEntities() {
	reason, ctx := StopShardLost, context.Background()
	if hctx := e.awaitFate(); hctx != nil {
		reason, ctx = StopShardReleased, hctx
	}
	e.mu.Lock()
	var insts []*instance
	for _, box := range e.boxes {
		if box.inst != nil {
			insts = append(insts, box.inst)
			box.inst = nil
		}
	}
	clear(e.boxes)
	n := e.queue.Len()
	e.queue = nil
	e.mu.Unlock()
	e.h.metrics.queued.Sub(float64(n))
	// A shard may hold thousands of resident entities, and a planned
	// release waits for their hooks within the interrupt timeout: run them
	// side by side, a bounded number at a time.
	sem := make(chan struct{}, stopHookConcurrency)
	var wg sync.WaitGroup
	for _, in := range insts {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			e.h.stopInstance(ctx, in, reason)
		}()
	}
	wg.Wait()
}

// stopHookConcurrency bounds the OnStop hooks of one shard running at once.
const stopHookConcurrency = 32

// awaitFate waits for the manager's decision on how the ownership ends,
// which comes right after the ownership context is cancelled.
func (e *shardExec) awaitFate() (handoff context.Context) {
	select {
	case <-e.fate:
		return e.handoffCtx
	case <-time.After(e.h.cfg.HookTimeout):
		return nil
	}
}

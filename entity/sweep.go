package entity

import (
	"math/rand/v2"
	"time"

	"github.com/tenurehq/tenure/entity/task"
)

const (
	// sweepBacklogPause separates the passes of a shard whose last pass was
	// cut short by its bounds (task.DefaultPurgeReads objects read,
	// task.DefaultPurgeScan keys listed): a backlog of old tasks drains in
	// bounded passes, a second apart, rather than in one pass that holds
	// the runner's S3 capacity for as long as it lasts.
	sweepBacklogPause = time.Second
	// sweepSlots bounds the shards of one runner sweeping at once.
	sweepSlots = 4
)

// sweep deletes the shard's finished tasks older than the retention (see
// Config.TaskRetention and task.Store.Purge), pass after pass, for as long
// as the ownership lasts. It runs beside the shard's loop, counted in
// workers, and every request it makes is under the ownership context: a
// lost shard or a detachment ends it at once, and it does nothing while
// the runner is detached (there is no ownership then).
//
// A new owner's first pass comes at a random point of its second reconcile
// interval (or sweep interval, if shorter): not with the listing and
// takeovers that follow an acquisition, not together with the shards
// acquired at the same time, and soon enough that shards changing hands
// more often than the sweep interval are still swept.
//
// Deleting is safe whoever does it (tenure task purge runs the same rule
// without any ownership): ownership only makes one runner sweep a shard.
func (e *shardExec) sweep() {
	defer e.sched.workers.Done()
	interval := e.h.cfg.SweepInterval()
	memo := task.NewPurgeMemo(0)
	cursor := ""
	first := min(interval, e.h.cfg.ReconcileInterval)
	timer := time.NewTimer(first + rand.N(first))
	defer timer.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-timer.C:
		}
		next, more := e.sweepPass(cursor, memo)
		cursor = next
		// Plus up to 10%, never less: spread, and at most one pass per
		// interval (an hour at the defaults).
		wait := interval + rand.N(interval/10+1)
		if more {
			wait = sweepBacklogPause
		}
		timer.Reset(wait)
	}
}

// sweepPass runs one bounded pass from cursor and returns where the next
// one starts and whether it has work waiting. A pass that fails starts
// again from cursor next time: deleting is idempotent.
func (e *shardExec) sweepPass(cursor string, memo *task.PurgeMemo) (next string, more bool) {
	select {
	case e.h.sweepSlots <- struct{}{}:
	case <-e.ctx.Done():
		return cursor, false
	}
	defer func() { <-e.h.sweepSlots }()
	start := time.Now()
	shard := e.own.Shard.String()
	now, err := e.h.tasks.Now(e.ctx)
	if err != nil {
		if e.ctx.Err() == nil {
			e.h.log.Warn("retention sweep: no S3 time; retrying at the next pass", "shard", shard, "err", err)
		}
		return cursor, false
	}
	// The earliest the S3 clock may read, minus the retention: a task that
	// finished before this is older than the retention whatever the
	// estimate's error.
	cutoff := now.Earliest().Add(-e.h.cfg.TaskRetention)
	res, err := e.h.tasks.Purge(e.ctx, task.PurgeOptions{
		Shard: e.own.Shard, Before: cutoff, After: cursor, SkipYoungIDs: true, Memo: memo,
	})
	e.h.metrics.purged.WithLabelValues(string(task.Completed)).Add(float64(res.Completed))
	e.h.metrics.purged.WithLabelValues(string(task.Failed)).Add(float64(res.Failed))
	e.h.metrics.purged.WithLabelValues(string(task.Cancelled)).Add(float64(res.Cancelled))
	if err != nil {
		if e.ctx.Err() == nil {
			e.h.log.Warn("retention sweep failed; retrying at the next pass", "shard", shard,
				"deleted", res.Deleted(), "err", err)
		}
		return cursor, false
	}
	e.h.metrics.sweeps.Inc()
	if res.Deleted() > 0 {
		e.h.log.Info("retention sweep deleted finished tasks", "shard", shard, "epoch", e.own.Epoch,
			"deleted", res.Deleted(), "completed", res.Completed, "failed", res.Failed, "cancelled", res.Cancelled,
			"scanned", res.Scanned, "read", res.Read, "kept", res.Kept(), "cutoff", cutoff.Format(time.RFC3339),
			"more", res.Next != "", "took", time.Since(start).Round(time.Millisecond))
	}
	return res.Next, res.Next != ""
}

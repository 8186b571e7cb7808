package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/storage"
)

// Waits of the CLI that depend on a runner (a task to end, a call's
// reply) say, when the runner is not there, who should have been: these
// read from etcd who holds a shard.

// shardReadTimeout bounds the reads that explain a wait: they run after
// the wait has run out, or while a call is under way, so that the command
// ends (or warns) promptly.
const shardReadTimeout = time.Second

// shardView is who holds a shard, as etcd says.
type shardView struct {
	runners int    // live runners in the cluster
	holder  string // the runner holding the shard's lock; "" for none
}

// membership is the part of the etcd store that tells who holds a shard.
type membership interface {
	Runners(ctx context.Context) ([]storage.RunnerInfo, int64, error)
	ShardLocks(ctx context.Context) ([]storage.ShardLock, int64, error)
}

// viewShard reads the live runners and the holder of shard, within
// shardReadTimeout. Undecodable records are left out (as status does).
func viewShard(ctx context.Context, m membership, shard storage.ShardID) (shardView, error) {
	ctx, cancel := context.WithTimeout(ctx, shardReadTimeout)
	defer cancel()
	runners, _, err := m.Runners(ctx)
	if err != nil && !errors.Is(err, storage.ErrCorrupt) {
		return shardView{}, err
	}
	v := shardView{runners: len(runners)}
	if v.runners == 0 {
		return v, nil // no lock can outlive every runner's lease
	}
	locks, _, err := m.ShardLocks(ctx)
	if err != nil && !errors.Is(err, storage.ErrCorrupt) {
		return shardView{}, err
	}
	for _, l := range locks {
		if l.Shard == shard {
			v.holder = l.RunnerID
		}
	}
	return v, nil
}

// noRunner says that no runner can serve shard, or "" when one holds it.
func (v shardView) noRunner(cluster string, shard storage.ShardID) string {
	switch {
	case v.runners == 0:
		return fmt.Sprintf("no runner is live in cluster %q (start one: tenure run, or tenure dev for a local cluster)", cluster)
	case v.holder == "":
		return fmt.Sprintf("no runner holds its shard %s (%d runner(s) live: the shard is between owners, or none serves group %s)", shard, v.runners, shard.Group)
	}
	return ""
}

// taskWaitTimedOut is the error of a task wait that ran out after waited:
// where the task stands (t, the last state read, may be nil) and, while it
// is pending, why no runner took it. Main exits exitTimedOut for it.
func taskWaitTimedOut(ctx context.Context, conn *Conn, ref string, t *task.Task, waited time.Duration) error {
	msg := fmt.Sprintf("timed out after %s waiting for task %s", waited, ref)
	if t == nil {
		return timedOutError{errors.New(msg + ": its state could not be read")}
	}
	msg += ": " + taskStanding(t)
	if t.Status == task.Pending && !delayed(t) {
		v, err := viewShard(context.WithoutCancel(ctx), conn.Store, t.Shard)
		switch {
		case err != nil:
			msg += fmt.Sprintf(" (who holds its shard %s could not be read: %v)", t.Shard, err)
		case v.noRunner(conn.Config.Cluster, t.Shard) != "":
			msg += ": no runner took it: " + v.noRunner(conn.Config.Cluster, t.Shard)
		default:
			msg += fmt.Sprintf(": runner %s holds its shard %s but has not started it (busy, or no handler for type %q)", v.holder, t.Shard, t.Type)
		}
	}
	return timedOutError{fmt.Errorf("%s; it stays submitted (tenure task get %s)", msg, ref)}
}

// taskStanding says where a task not yet ended stands.
func taskStanding(t *task.Task) string {
	attempt := fmt.Sprintf("attempt %d of %d", t.Attempt, t.MaxAttempts)
	switch t.Status {
	case task.Running:
		if t.Claim != nil {
			return fmt.Sprintf("still running (%s) on runner %s", attempt, t.Claim.RunnerID)
		}
		return "still running (" + attempt + ")"
	case task.Pending:
		s := "still pending (" + attempt
		if t.Error != "" {
			s += ", the last one failed: " + t.Error
		}
		s += ")"
		if delayed(t) {
			s += ", due at " + t.AvailableAt.UTC().Format(time.RFC3339)
		}
		return s
	}
	return string(t.Status)
}

// delayed reports whether t is not due yet (submitted with --delay, or
// retried later). Task times are S3 times, which the client estimates to
// the second: a task due at once has AvailableAt at or before CreatedAt,
// and a time up to a second ahead of this machine's clock is not a delay.
func delayed(t *task.Task) bool {
	return t.AvailableAt.After(t.CreatedAt) && t.AvailableAt.After(time.Now().Add(time.Second))
}

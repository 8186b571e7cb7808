package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/poll"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/s3coord"
)

// The partition test of coordination on S3: one runner of three loses its
// S3 (a blackhole: its requests go unanswered) for two lease TTLs while
// tasks run on every shard, and the others must take its shards over
// without ever running a task or an entity twice at once.
const (
	s3PartShards = 16
	s3PartHold   = 2 * s3SoakTTL // how long the victim's S3 is blackholed
	// s3ClockSlack is what the store clock's resolution adds to a lease:
	// S3 gives its time in the Date header, to the second, so a renewal
	// sets the expiry from the latest the store's time can be (up to 1s
	// late), and a lease is judged lapsed only once the earliest the store's
	// time can be is past it (up to 1s more); see storage/s3coord's doc.
	s3ClockSlack = 2 * time.Second
	// s3PartMargin is for the rest: the tombstone and lock writes, and the
	// observer's own poll of the locks, on a busy machine.
	s3PartMargin = time.Second
)

// s3TakeoverBound is the backend's bound on a takeover, from the moment a
// runner is cut off to the moment its shards are seen locked by others:
// its lease, renewed at the latest just before the cut, lapses within the
// TTL plus the clock slack; the others' membership poll wakes when the
// first lease may lapse, and polls at most the longest poll interval
// apart otherwise (the runner's default, s3coord.DefaultMaxPollInterval,
// counted in full: a poll may fail); then the margin.
const s3TakeoverBound = s3SoakTTL + s3ClockSlack + s3coord.DefaultMaxPollInterval + s3PartMargin

// TestS3PartitionSingleOwner: three runners coordinating on S3, each
// through its own S3 proxy, run tasks (some per entity) on every shard
// through the recorder; one runner's S3 is blackholed for 2 TTLs. Judged
// from outside: no two executions of a task or an entity overlap and none
// ran outside its runner's lock (the audit against the test's own poll of
// the locks); every execution of the victim ended before the first
// execution of the new holders of its shards began; its shards were
// re-owned by the others within s3TakeoverBound of the cut; after the
// heal it holds shards again, and every accepted task completed exactly
// once.
func TestS3PartitionSingleOwner(t *testing.T) {
	rec := newRecorder(t)
	c := newS3Cluster(t, s3PartShards)
	ids := []string{"p1", "p2", "p3"}
	for _, id := range ids {
		c.run(id, s3SoakFlags(rec)...)
	}
	c.waitAllOwned(ids, 60*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	locks := watchS3Locks(ctx, c)
	client := c.taskClient()
	book := newLedger(c.Meta.Shards)

	// Load: a task every 100ms; three in four on one of 20 entities, of
	// 100–300ms, the others of 1.5–3s, so that the victim is running some
	// when it is cut off and must stop them before its lease can lapse.
	// (Thirty 2–4s tasks at once on 2 busy cores had every runner's lease
	// renewals time out, and the leases lapse, again and again.)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadDone := book.submitEvery(loadCtx, t, client, 100*time.Millisecond, 7, func(i int, rnd *rand.Rand) task.SubmitRequest {
		req := task.SubmitRequest{Type: "audit", Input: json.RawMessage(fmt.Sprintf(`{"ms":%d}`, 1500+rnd.IntN(1500))), MaxAttempts: 20}
		if i%4 != 0 {
			req.Entity = fmt.Sprintf("e%02d", rnd.IntN(20))
			req.Input = json.RawMessage(fmt.Sprintf(`{"ms":%d}`, 100+rnd.IntN(200)))
		}
		return req
	})

	// Tasks ran on every shard, and the victim is running a long one now.
	victim := c.runners.Get("p2")
	others := []string{"p1", "p3"}
	// The load's coverage, not a bound under test: 2 minutes, as a busy
	// machine can stall every runner's renewals for seconds at a time.
	if err := poll.Until(ctx, 2*time.Minute, 50*time.Millisecond, func() (bool, string, error) {
		seen := map[storage.ShardID]bool{}
		for _, x := range rec.All() {
			seen[x.Shard] = true
		}
		long := 0
		for _, x := range runningOn(rec, victim.id) {
			if x.Entity == "" {
				long++
			}
		}
		return len(seen) == c.Meta.Shards && long >= 1,
			fmt.Sprintf("%d executions on %d of %d shards; %d long ones running on %s", len(rec.All()), len(seen), c.Meta.Shards, long, victim.id), nil
	}); err != nil {
		t.Fatalf("waiting for executions on every shard, and a long one on %s now: %v", victim.id, err)
	}
	var held []storage.ShardID
	for s, r := range c.owners() {
		if r == victim.id {
			held = append(held, s)
		}
	}
	if len(held) == 0 {
		t.Fatalf("%s holds no shard at the cut", victim.id)
	}

	victim.s3.set(s3Blackhole, 1)
	cut := time.Now()
	running := runningOn(rec, victim.id)
	t.Logf("blackholed %s's S3 with %d tasks running on it, holding %d shards %v", victim.id, len(running), len(held), held)
	movedAt, err := locks.Await(ctx, victim.id+"'s shards locked by the others", s3TakeoverBound+30*time.Second, func(h map[storage.ShardID]string) bool {
		for _, s := range held {
			if h[s] == "" || h[s] == victim.id {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	took := movedAt.Sub(cut)
	t.Logf("%s's shards re-owned by %v %s after the cut (bound %s: TTL %s + clock slack %s + poll %s + margin %s)",
		victim.id, others, took.Round(time.Millisecond), s3TakeoverBound, s3SoakTTL, s3ClockSlack, s3coord.DefaultMaxPollInterval, s3PartMargin)
	if took > s3TakeoverBound {
		t.Errorf("%s's shards re-owned %s after the cut, past the bound %s", victim.id, took.Round(time.Millisecond), s3TakeoverBound)
	}
	// The partition's length, not synchronisation: the load runs on.
	time.Sleep(time.Until(cut.Add(s3PartHold)))
	victim.s3.set(s3Pass, 0)
	healed := time.Now()
	t.Logf("healed %s's S3 %s after the cut", victim.id, healed.Sub(cut).Round(time.Millisecond))
	if victim.exited() {
		t.Fatalf("%s exited during the partition", victim.id)
	}
	back, err := locks.Await(ctx, victim.id+" holding a shard again", 60*time.Second, func(h map[storage.ShardID]string) bool {
		for _, r := range h {
			if r == victim.id {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("rejoin: %v", err)
	}
	t.Logf("%s holds shards again %s after the heal", victim.id, back.Sub(healed).Round(time.Millisecond))
	// Load a little past the rejoin, so that it runs tasks again.
	testenv.WaitFor(t, victim.id+" running tasks again", 30*time.Second, func() bool {
		for _, x := range rec.All() {
			if x.Runner == victim.id && x.Start.After(back) {
				return true
			}
		}
		return false
	})
	stopLoad()
	<-loadDone
	if len(running) == 0 {
		t.Fatalf("no task ran on %s at the cut: the test proves nothing", victim.id)
	}
	stopped := 0
	for _, x := range rec.all() {
		for _, y := range running {
			if x.TaskID == y.TaskID && x.Runner == y.Runner && x.Start.Equal(y.Start) && x.Cancelled() {
				stopped++
				t.Logf("%s stopped %s %s after the cut", victim.id, x.TaskID, x.End.Sub(cut).Round(time.Millisecond))
			}
		}
	}
	t.Logf("%d of the %d tasks running on %s at the cut were stopped by it, the others ended", stopped, len(running), victim.id)

	// The victim's executions (started before the heal) ended before any
	// execution of its shards' new holders there began.
	execs := rec.all()
	wasHeld := map[storage.ShardID]bool{}
	for _, s := range held {
		wasHeld[s] = true
	}
	var lastVictim, firstNew auditExec
	for _, x := range execs {
		if !wasHeld[x.Shard] {
			continue
		}
		switch {
		case x.Runner == victim.id && x.Start.Before(healed):
			if lastVictim.End.IsZero() || x.End.After(lastVictim.End) {
				lastVictim = x
			}
		case x.Runner != victim.id && x.Start.After(cut):
			if firstNew.Start.IsZero() || x.Start.Before(firstNew.Start) {
				firstNew = x
			}
		}
	}
	switch {
	case firstNew.Start.IsZero():
		t.Errorf("no execution by the new holders of %s's shards after the cut", victim.id)
	case !lastVictim.End.Before(firstNew.Start):
		t.Errorf("%s's execution of %s on %s ended at %s, after %s started %s on %s at %s",
			victim.id, lastVictim.TaskID, lastVictim.Shard, lastVictim.End.Format("15:04:05.000"),
			firstNew.Runner, firstNew.TaskID, firstNew.Shard, firstNew.Start.Format("15:04:05.000"))
	default:
		t.Logf("%s's last execution on its shards ended %s after the cut; the new holders' first began %s after it (%s after the cut)",
			victim.id, lastVictim.End.Sub(cut).Round(time.Millisecond), firstNew.Start.Sub(lastVictim.End).Round(time.Millisecond),
			firstNew.Start.Sub(cut).Round(time.Millisecond))
	}

	// Every accepted task completed exactly once; nothing overlapped or
	// ran outside its runner's lock.
	if err := book.resolve(ctx, client, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	accepted, rejected := book.accepted()
	if pending := waitTerminal(ctx, client, accepted, 2*time.Minute); len(pending) > 0 {
		t.Logf("%d accepted tasks not terminal after 2 minutes, e.g. %v", len(pending), pending[:min(len(pending), 5)])
	}
	rep := audit(t, client, rec.all(), locks, accepted, rejected)
	t.Logf("audit: %d accepted, %d executions (%d cancelled), %d completed, %d failed, %d overlaps, %d outside the lock (acquisition lag %s)",
		len(accepted), rep.executions, rep.cancelled, rep.completed, rep.failed, len(rep.overlaps), len(rep.outsideLock), s3LockLag)
	rep.check(t)
	if rep.completed != len(accepted) {
		t.Errorf("%d of %d accepted tasks completed", rep.completed, len(accepted))
	}
}

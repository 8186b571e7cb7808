package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/storage"
)

const drainLong = `Asks a runner (POST /admin/drain on its registered admin address) to hand
its shards over gracefully: its weight drops to 0, so the assignment moves
its shards to the other runners, and it releases them one by one, each
after its running tasks are interrupted and put back to pending, so the
new owner starts them at once. The runner stays up, owning nothing.

Then it waits up to --wait until the runner holds no shard lock (in etcd,
or S3 with coordination: s3) and reports owning none, and fails naming what is left if it still owns
shards then (exit status 3: the drain goes on). --wait 0 only asks. -o json prints {"runner", "shards_moved",
"shards_left", "drained", "waited_seconds"} (also when the wait ran out).
`

// drainPoll is how often drain checks the runner's shards.
const drainPoll = 100 * time.Millisecond

func newDrainCmd(cli *CLI) *cobra.Command {
	wait := durationFlag{d: time.Minute, set: true}
	cmd := &cobra.Command{
		Use:   "drain RUNNER-ID",
		Short: "move a runner's shards away gracefully",
		Long:  drainLong,
		Args: func(_ *cobra.Command, args []string) error {
			switch len(args) {
			case 0:
				return usagef("missing RUNNER-ID (tenure status lists them)")
			case 1:
				return nil
			}
			return usagef("unexpected argument %q after RUNNER-ID", args[1])
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return drain(cmd.Context(), cli, args[0], wait.d, cli.wantJSON(cmd))
		},
	}
	cmd.Flags().Var(&wait, "wait", "wait up to `D` for the shards to move (0: do not wait)")
	return cmd
}

// DrainReport is what `tenure drain -o json` prints.
type DrainReport struct {
	Runner string `json:"runner"`
	// ShardsMoved counts the shard locks the runner held when asked and
	// no longer holds.
	ShardsMoved int `json:"shards_moved"`
	// ShardsLeft are the shards whose locks it still holds ([] once
	// drained).
	ShardsLeft []string `json:"shards_left"`
	// Drained: it holds no shard lock and reports owning none.
	Drained bool `json:"drained"`
	// Waited is how long drain waited, in seconds (0 with --wait 0).
	Waited float64 `json:"waited_seconds"`
}

// drain runs `tenure drain`: etcd and the runner's admin endpoint only.
func drain(ctx context.Context, cli *CLI, id string, wait time.Duration, asJSON bool) error {
	cfg, err := cli.LoadCoordConfig()
	if err != nil {
		return flatten(err)
	}
	rs, err := cli.openCoord(ctx, cfg)
	if err != nil {
		return flatten(err)
	}
	defer rs.Close()
	runners, _, err := rs.Runners(ctx)
	if err != nil && !errors.Is(err, storage.ErrCorrupt) {
		return err
	}
	i := slices.IndexFunc(runners, func(r storage.RunnerInfo) bool { return r.ID == id })
	if i < 0 {
		var live []string
		for _, r := range runners {
			live = append(live, r.ID)
		}
		slices.Sort(live)
		return fmt.Errorf("runner %q is not live in cluster %q (live: %s)", id, cfg.Cluster, orDash(strings.Join(live, ", ")))
	}
	r := runners[i]
	if r.Addr == "" {
		return fmt.Errorf("runner %s registered no admin address (its admin_addr is empty), so it cannot be asked to drain", id)
	}
	adm, err := newAdmin(cli, cfg)
	if err != nil {
		return err
	}
	defer adm.close()
	before, _, err := drainLeft(ctx, rs, adm, r)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, adminActionTimeout)
	_, err = adm.do(actx, http.MethodPost, adminURL(r.Addr, "/admin/drain"))
	cancel()
	if err != nil {
		return fmt.Errorf("asking runner %s to drain: %w", id, err)
	}
	start := time.Now()
	rep := DrainReport{Runner: id, ShardsLeft: append([]string{}, before...)}
	done := func() error {
		rep.ShardsMoved = max(len(before)-len(rep.ShardsLeft), 0)
		rep.Waited = time.Since(start).Seconds()
		if wait == 0 {
			rep.Waited = 0
		}
		if asJSON {
			return writeJSON(cli.Stdout, rep)
		}
		return nil
	}
	if !asJSON {
		fmt.Fprintf(cli.Stdout, "runner %s is draining\n", id)
	}
	if wait == 0 {
		return done()
	}

	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		left, reported, err := drainLeft(ctx, rs, adm, r)
		if err != nil {
			return err
		}
		rep.ShardsLeft = append([]string{}, left...)
		if len(left) == 0 && reported == 0 {
			rep.Drained = true
			if !asJSON {
				fmt.Fprintf(cli.Stdout, "runner %s owns no shards (drained in %s)\n", id, time.Since(start).Round(time.Millisecond))
			}
			return done()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			if err := done(); err != nil {
				return err
			}
			return timedOutError{fmt.Errorf("runner %s still holds %d shard lock(s) after %s (%s); its admin reports %d owned",
				id, len(left), wait, abbrevList(left, 10), reported)}
		case <-tick.C:
		}
	}
}

// drainLeft returns the shards whose locks the runner still holds in etcd
// (authoritative) and the count its admin endpoint reports owning (0 when
// it does not answer: a runner that stopped owns nothing).
func drainLeft(ctx context.Context, rs interface {
	ShardLocks(ctx context.Context) ([]storage.ShardLock, int64, error)
}, adm *admin, r storage.RunnerInfo) ([]string, int, error) {
	locks, _, err := rs.ShardLocks(ctx)
	if err != nil && !errors.Is(err, storage.ErrCorrupt) {
		return nil, 0, err
	}
	var left []string
	for _, l := range locks {
		if l.RunnerID == r.ID {
			left = append(left, l.Shard.String())
		}
	}
	reported := 0
	if st, err := adm.status(ctx, r.Addr); err == nil && st.Owned != nil {
		reported = *st.Owned
	}
	return left, reported, nil
}

// abbrevList joins the first n items and says how many more there are.
func abbrevList(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}

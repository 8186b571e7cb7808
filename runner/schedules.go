package runner

import (
	"fmt"

	"github.com/tenurehq/tenure/entity/schedule"
	"github.com/tenurehq/tenure/storage"
)

// Schedules returns a client of the cron schedules of the client's shard
// group, placed by the cluster meta as its tasks are. opts add to (or
// override) the group and shard count it sets.
func (c *Client) Schedules(opts ...schedule.Option) (*schedule.Client, error) {
	base := []schedule.Option{schedule.WithGroup(c.group), schedule.WithShards(c.meta.Shards)}
	return schedule.NewClient(c.Client, append(base, opts...)...)
}

// registerSchedules registers the schedule driver (schedule.DriverType)
// with the types the host starts with, driven by a client on the runner's
// own connections and registry, so that every runner serves the ticks of
// the schedules whose shards it owns. It runs in Run, once the meta is
// known: the driver places tasks by the meta's shard count. The driver
// serves the runner's first group (as Runner.Client submits to): a
// schedule of another group is refused by its driver, naming the group.
func (r *Runner) registerSchedules(meta storage.ClusterMeta) error {
	c, err := newClient(r.cfg, meta, clientOptions{}, r.base, r.tracer.Tracer(tracerName), r.obj, r.rs,
		func() error { return r.life.stopped(r.cfg.RunnerID) })
	if err != nil {
		return err
	}
	sc, err := c.Schedules(schedule.WithRegistry(r.reg), schedule.WithLogger(r.base.With("runner", r.cfg.RunnerID)))
	if err != nil {
		return fmt.Errorf("runner %s: schedules: %w", r.cfg.RunnerID, err)
	}
	if err := schedule.Register(r.types, sc); err != nil {
		return fmt.Errorf("runner %s: registering the schedule driver: %w", r.cfg.RunnerID, err)
	}
	return nil
}

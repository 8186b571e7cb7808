package runner

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/routing"
)

// Placement by type: every runner lists the types it hosts in its record
// (storage.RunnerInfo.Types), and callers place a type on the shard group
// whose runners host it (routing.Table.PlaceType). Calls do so in package
// messaging; this file does it for task submissions, and warns at start
// when runners of one group host different types (calls and tasks of a
// type then fail, or wait, on the shards its runners do not hold).

// typeGapWait bounds how long a starting runner looks for its own record
// in its routing view before it checks its groups' types.
const typeGapWait = 30 * time.Second

// warnTypeGaps logs, once this runner's record is in table's view, each
// runner of the groups it serves that lacks types another runner of the
// group hosts.
func (r *Runner) warnTypeGaps(ctx context.Context, table *routing.Table, types []string) {
	if len(types) == 0 {
		return
	}
	if err := table.WaitReady(ctx); err != nil {
		return
	}
	deadline := time.NewTimer(typeGapWait)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for !slices.Contains(table.HostGroups(types[0]), r.firstGroup()) && !slices.Contains(table.HostGroups(types[0]), "*") {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
	groups := r.cfg.Groups
	if len(groups) == 0 {
		groups = r.cfg.ShardGroups
	}
	for _, g := range groups {
		for _, gap := range table.TypeGaps(g) {
			r.log.Warn("runners of one shard group host different types: calls and tasks of a type fail or wait on the shards its runners do not hold; give each service a shard group of its own (groups) or register the same types on all",
				"group", g, "runner", gap.Runner, "missing_types", strings.Join(gap.Missing, ","))
		}
	}
}

// firstGroup is the first group this runner serves ("*" when it serves
// all, as routing names such runners).
func (r *Runner) firstGroup() string {
	if len(r.cfg.Groups) == 0 {
		return "*"
	}
	return r.cfg.Groups[0]
}

// Submit submits req to the shard group whose runners host req.Type
// (routing.Table.PlaceType, preferring the client's own group), so that a
// service submits to a type another service hosts without naming its
// group; a type no runner lists (or a view from runners that list no
// types) goes to the client's group, where it waits for a runner that
// hosts it. The rest is task.Client.Submit's. A client made by Connect
// starts its routing view (one etcd watch) on its first submission or
// call.
func (c *Client) Submit(ctx context.Context, req task.SubmitRequest) (*task.Task, bool, error) {
	tc, err := c.submitterFor(ctx, req.Type)
	if err != nil {
		return nil, false, err
	}
	return tc.Submit(ctx, req)
}

// submitterFor is the task client of typ's group.
func (c *Client) submitterFor(ctx context.Context, typ string) (*task.Client, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if c.table == nil {
		return c.Client, nil
	}
	table, err := c.table()
	if err != nil || table == nil {
		return c.Client, nil // no routing view (messaging not started): the client's group
	}
	if err := table.WaitReady(ctx); err != nil {
		return nil, err
	}
	group, h := table.PlaceType(typ, c.group)
	if h != routing.Hosted || group == c.group || group == "" {
		return c.Client, nil
	}
	c.groupsMu.Lock()
	defer c.groupsMu.Unlock()
	if tc, ok := c.groups[group]; ok {
		return tc, nil
	}
	tc, err := c.Client.InGroup(group)
	if err != nil {
		return nil, err
	}
	if c.groups == nil {
		c.groups = map[string]*task.Client{}
	}
	c.groups[group] = tc
	return tc, nil
}

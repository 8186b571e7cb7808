package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/sharding"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
)

// Shard states of the shard views.
const (
	// ShardOwned: held by a reachable runner that the placement gives it
	// to, and that does not drain.
	ShardOwned = "owned"
	// ShardMoving: held by a runner the placement no longer gives it to,
	// or by a draining runner: a hand-over is due or under way.
	ShardMoving = "moving"
	// ShardUnowned: no lock: nobody runs the shard now.
	ShardUnowned = "unowned"
	// ShardUnreachable: held by a runner whose admin endpoint does not
	// answer (crashed, cut off): the lock stays until its lease ends.
	ShardUnreachable = "unreachable"
)

// shardsView is GET shards.
type shardsView struct {
	Groups      []shardGroup `json:"groups"`
	Runners     []string     `json:"runners"` // live runners, by id
	GeneratedAt string       `json:"generated_at"`
}

type shardGroup struct {
	Name   string      `json:"name"`
	Shards []shardCell `json:"shards"`
}

// shardCell is one shard of the shard views.
type shardCell struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`     // group/index
	Holder   string `json:"holder"` // "" when unowned
	Epoch    int64  `json:"epoch"`  // its lock's (0 when unowned)
	State    string `json:"state"`
	Assigned string `json:"assigned"` // where the placement puts it ("" when no runner serves the group)
}

// assignment computes where the cluster's placement procedure puts every
// shard, given the live runners (their registered weights and groups) and
// the lock holders: what the runners converge to.
func (s *snapshot) assignment() (placement.Assignment, error) {
	proc, err := placement.ProcedureNamed(s.meta.Hash)
	if err != nil {
		return nil, fmt.Errorf("cluster meta: %w", err)
	}
	cands := make([]placement.Candidate, 0, len(s.runners))
	for _, r := range s.runners {
		c := placement.CandidateOf(r)
		if s.draining(r.ID) {
			c.Weight = 0
		}
		cands = append(cands, c)
	}
	holders := placement.Assignment{}
	for sh, l := range s.locks {
		holders[sh] = l.RunnerID
	}
	return proc.Reassign(s.meta.Groups, s.meta.Shards, cands, holders), nil
}

// cell describes shard sh.
func (s *snapshot) cell(sh storage.ShardID, assigned placement.Assignment) shardCell {
	c := shardCell{Index: sh.Index, ID: sh.String(), Assigned: assigned[sh], State: ShardUnowned}
	l, held := s.locks[sh]
	if !held {
		return c
	}
	c.Holder, c.Epoch = l.RunnerID, l.Epoch
	switch {
	case !s.reachable(l.RunnerID):
		c.State = ShardUnreachable
	case l.RunnerID != c.Assigned || s.draining(l.RunnerID):
		c.State = ShardMoving
	default:
		c.State = ShardOwned
	}
	return c
}

func (a *API) shards(ctx context.Context, w http.ResponseWriter, _ *http.Request) error {
	s, err := a.read(ctx)
	if err != nil {
		return err
	}
	assigned, err := s.assignment()
	if err != nil {
		return err
	}
	v := shardsView{Groups: []shardGroup{}, Runners: []string{}, GeneratedAt: utc(a.d.Now())}
	for _, r := range s.runners {
		v.Runners = append(v.Runners, r.ID)
	}
	for _, g := range s.meta.Groups {
		sg := shardGroup{Name: g, Shards: make([]shardCell, 0, s.meta.Shards)}
		for i := range s.meta.Shards {
			sg.Shards = append(sg.Shards, s.cell(storage.ShardID{Group: g, Index: i}, assigned))
		}
		v.Groups = append(v.Groups, sg)
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// shardView is GET shards/{group}/{index}.
type shardView struct {
	shardCell
	Group string `json:"group"`
	// History is the shard's recent lock changes as the serving runner's
	// membership stream saw them, oldest first.
	History []sharding.LockEvent `json:"history"`
	// Resident lists the entities resident on the holder for the shard;
	// null, with ResidentError saying why, when the request carries no
	// admin credential or the holder did not answer.
	Resident          []entity.ResidentEntity `json:"resident"`
	ResidentError     string                  `json:"resident_error,omitempty"`
	ResidentTruncated bool                    `json:"resident_truncated,omitempty"`
}

// shardParam reads the {group} and {index} of a shard path, checked
// against the cluster meta.
func shardParam(meta storage.ClusterMeta, groupName, index string) (storage.ShardID, error) {
	if groupName == "" {
		return storage.ShardID{}, badRequest("group", "empty")
	}
	g, err := group(meta, "group", groupName)
	if err != nil {
		return storage.ShardID{}, err
	}
	i, err := strconv.Atoi(index)
	if err != nil {
		return storage.ShardID{}, badRequest("index", "%q is not a shard index (0 to %d)", index, meta.Shards-1)
	}
	if i < 0 || i >= meta.Shards {
		return storage.ShardID{}, badRequest("index", "%d is out of range: the cluster has shards 0 to %d per group", i, meta.Shards-1)
	}
	return storage.ShardID{Group: g, Index: i}, nil
}

func (a *API) shard(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	s, err := a.read(ctx)
	if err != nil {
		return err
	}
	sh, err := shardParam(s.meta, r.PathValue("group"), r.PathValue("index"))
	if err != nil {
		return err
	}
	assigned, err := s.assignment()
	if err != nil {
		return err
	}
	v := shardView{shardCell: s.cell(sh, assigned), Group: sh.Group, History: []sharding.LockEvent{}}
	if a.d.LockHistory != nil {
		if h := a.d.LockHistory(sh); h != nil {
			v.History = h
		}
	}
	switch {
	case !a.authorized(r):
		v.ResidentError = "resident entity ids are user data: they need the admin credential"
	case v.Holder == "":
		v.ResidentError = "the shard is unowned: no runner holds it"
	default:
		rr, err := a.resident(ctx, s, v.Holder, sh)
		switch {
		case err != nil:
			v.ResidentError = err.Error()
		case !rr.Owned:
			v.ResidentError = fmt.Sprintf("runner %s does not run shard %s now (it is moving)", v.Holder, sh)
		default:
			v.Resident, v.ResidentTruncated = rr.Resident, rr.Truncated
		}
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// resident asks the holder of sh for the entities resident there.
func (a *API) resident(ctx context.Context, s *snapshot, holder string, sh storage.ShardID) (ResidentReply, error) {
	i, ok := s.byID[holder]
	if !ok {
		return ResidentReply{}, errors.New("runner " + holder + " is not registered")
	}
	rr, err := a.d.Peers.Resident(ctx, s.runners[i], sh)
	if err != nil {
		return ResidentReply{}, err
	}
	if rr.Resident == nil {
		rr.Resident = []entity.ResidentEntity{}
	}
	return rr, nil
}

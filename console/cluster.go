package console

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"

	"github.com/tenurehq/tenure/storage"
)

// clusterView is GET cluster.
type clusterView struct {
	Cluster       string   `json:"cluster"`
	Shards        int      `json:"shards"` // per group
	Groups        []string `json:"groups"`
	Procedure     string   `json:"procedure"`
	ConfigVersion int64    `json:"config_version"` // of the stored dynamic config document (0: none)
	GeneratedAt   string   `json:"generated_at"`
	ServedBy      string   `json:"served_by"`
	// ShardsOwned counts the shards with a lock; ShardsUnowned the rest
	// (shards × groups − owned); ShardsHeldUnreachable those of
	// ShardsOwned whose holder's admin endpoint did not answer.
	ShardsOwned           int             `json:"shards_owned"`
	ShardsUnowned         int             `json:"shards_unowned"`
	ShardsHeldUnreachable int             `json:"shards_held_unreachable"`
	Runners               []clusterRunner `json:"runners"`
}

// clusterRunner is one live runner of GET cluster: its registration, its
// locks in etcd and what it says of itself (null where it did not
// answer).
type clusterRunner struct {
	ID               string   `json:"id"`
	Addr             string   `json:"addr"`
	CallAddr         string   `json:"call_addr"`
	Version          string   `json:"version"`
	Reachable        bool     `json:"reachable"`
	StatusError      string   `json:"status_error"`
	Attached         *bool    `json:"attached"`
	DetachReason     string   `json:"detach_reason"`
	Mode             *string  `json:"mode"`
	Canary           bool     `json:"canary"`
	RolloutBucket    *int     `json:"rollout_bucket"`
	LeaseLeftSeconds *float64 `json:"lease_left_seconds"`
	Draining         bool     `json:"draining"`
	Weight           float64  `json:"weight"`
	Groups           []string `json:"groups"`
	ConfigVersion    *int64   `json:"config_version"`
	ConfigError      string   `json:"config_error"`
	ShardsHeld       int      `json:"shards_held"` // its locks in etcd
	ResidentEntities *int     `json:"resident_entities"`
	CallsPerSecond   *float64 `json:"calls_per_second"`
	TasksPerSecond   *float64 `json:"tasks_per_second"`
	Types            []string `json:"types"`
	StartedAt        string   `json:"started_at"`
}

// snapshot is what the cluster and shard views read: etcd's view of the
// cluster and every live runner's answer.
type snapshot struct {
	meta     storage.ClusterMeta
	runners  []storage.RunnerInfo // sorted by id
	byID     map[string]int       // runner id → index in runners
	locks    map[storage.ShardID]storage.ShardLock
	statuses []RunnerStatus
	errs     []error // per runner: why its status is missing
}

// reachable reports whether runner id answered.
func (s *snapshot) reachable(id string) bool {
	i, ok := s.byID[id]
	return ok && s.errs[i] == nil
}

// draining reports whether runner id drains: weight 0 in its
// registration, or its own word.
func (s *snapshot) draining(id string) bool {
	i, ok := s.byID[id]
	return ok && (s.runners[i].Weight == 0 || (s.errs[i] == nil && s.statuses[i].Draining))
}

// read takes a snapshot: meta, runners and locks from etcd, then every
// runner's status at once (each within the peers' status bound).
func (a *API) read(ctx context.Context) (*snapshot, error) {
	meta, err := a.meta(ctx)
	if err != nil {
		return nil, err
	}
	runners, _, err := a.d.Store.Runners(ctx)
	if err != nil && len(runners) == 0 {
		return nil, unavailable("listing the runners in etcd", err)
	}
	locks, _, err := a.d.Store.ShardLocks(ctx)
	if err != nil && len(locks) == 0 {
		return nil, unavailable("listing the shard locks in etcd", err)
	}
	sortRunners(runners)
	s := &snapshot{meta: meta, runners: runners, byID: map[string]int{}, locks: map[storage.ShardID]storage.ShardLock{}}
	for i, r := range runners {
		s.byID[r.ID] = i
	}
	for _, l := range locks {
		if slices.Contains(meta.Groups, l.Shard.Group) && l.Shard.Index >= 0 && l.Shard.Index < meta.Shards {
			s.locks[l.Shard] = l
		}
	}
	s.statuses, s.errs = statuses(ctx, a.d.Peers, runners)
	return s, nil
}

// configVersion reads the stored dynamic config document's version (0
// when there is none or it does not say).
func (a *API) configVersion(ctx context.Context) (int64, error) {
	cv, err := a.d.Store.Config(ctx)
	if err != nil {
		return 0, unavailable("reading the dynamic config from etcd", err)
	}
	if cv.Value == nil {
		return 0, nil
	}
	var doc struct {
		Version int64 `json:"version"`
	}
	_ = json.Unmarshal(cv.Value, &doc) // an undecodable document is the config view's to report
	return doc.Version, nil
}

func (a *API) cluster(ctx context.Context, w http.ResponseWriter, _ *http.Request) error {
	s, err := a.read(ctx)
	if err != nil {
		return err
	}
	version, err := a.configVersion(ctx)
	if err != nil {
		return err
	}
	v := clusterView{Cluster: a.d.Cluster, Shards: s.meta.Shards, Groups: s.meta.Groups, Procedure: s.meta.Hash,
		ConfigVersion: version, GeneratedAt: utc(a.d.Now()), ServedBy: a.d.RunnerID, Runners: []clusterRunner{}}
	held := map[string]int{}
	for _, l := range s.locks {
		held[l.RunnerID]++
		v.ShardsOwned++
		if !s.reachable(l.RunnerID) {
			v.ShardsHeldUnreachable++
		}
	}
	v.ShardsUnowned = s.meta.Shards*len(s.meta.Groups) - v.ShardsOwned
	for i, r := range s.runners {
		cr := clusterRunner{ID: r.ID, Addr: r.Addr, CallAddr: r.CallAddr, Version: r.Version, Weight: r.Weight,
			Groups: r.Groups, ShardsHeld: held[r.ID], Types: r.Types, StartedAt: utc(r.StartedAt), Draining: s.draining(r.ID)}
		if cr.Groups == nil {
			cr.Groups = []string{}
		}
		if cr.Types == nil {
			cr.Types = []string{}
		}
		if err := s.errs[i]; err != nil {
			cr.StatusError = err.Error()
			v.Runners = append(v.Runners, cr)
			continue
		}
		st := s.statuses[i]
		cr.Reachable = true
		cr.Attached, cr.DetachReason, cr.Canary = st.Attached, st.DetachReason, st.ConfigCanary
		if st.Mode != "" {
			cr.Mode = &st.Mode
		}
		cr.RolloutBucket, cr.LeaseLeftSeconds = st.RolloutBucket, st.LeaseDeadlineLag
		cr.ConfigVersion, cr.ConfigError = st.ConfigVersion, st.ConfigError
		cr.ResidentEntities, cr.CallsPerSecond, cr.TasksPerSecond = st.ResidentEntities, st.CallsPerSecond, st.TasksPerSecond
		if st.Version != "" {
			cr.Version = st.Version
		}
		v.Runners = append(v.Runners, cr)
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
)

const statusLong = `Shows the cluster: its shape (shards per group, groups), the dynamic config
version, every live runner (id, admin address, weight, attached, shards
owned, lease deadline lag, detachment mode, the dynamic config version it
runs and why it refused a newer one), the types each runner hosts (from its
membership record) and who holds the shards.

Ownership comes from the shard locks in the coordination store (etcd, or
S3 with coordination: s3), which are authoritative.
Attachment, lag, mode and config come from each runner's admin endpoint
(GET /debug/status, 1s timeout); an unreachable runner shows them as
unknown (null in JSON) and is not an error. A runner that does not answer
but whose lease is alive (killed, hung, or cut off from this machine)
still holds its shard locks: its shards are counted as held by an
unreachable runner, with the most time its lease has left (the lease's
TTL as the coordination store counts it, in whole seconds on etcd: an
upper bound). No other runner takes
them before that lease ends, unless the runner renews it. The summary
line reads, for instance:

  64 shards: 41 owned, 23 held by unreachable runners (lease ends in ≤ 8s), 0 unowned

-o json prints one object, stable across versions (fields may be added,
none renamed or removed):

  {
    "cluster": "dev",               cluster name
    "shards": 64,                   shards per group
    "groups": ["default"],          shard groups
    "config_version": 3,            dynamic config version stored (0: none)
    "config_error": "…",            only when the stored document is invalid
    "runners": [{                   live runners, by id
      "id": "r1",
      "addr": "10.0.0.5:9310",      admin address ("" if none)
      "weight": 1,                  registered weight (0: draining)
      "version": "v0.1.0",          software version
      "types": ["counter", "echo"], task and entity types it hosts, sorted, as
                                    its membership record says ([]: a
                                    runner older than these records)
      "attached": true,             null when the runner is unreachable
      "owned": 64,                  shard locks it holds
      "lease_deadline_lag_seconds": 9.2,   null when unreachable
      "mode": "enforce",            detachment mode ("" when unreachable)
      "detach_reason": "",          why it is detached, if it is
      "draining": false,
      "config_version": 3,          dynamic config version it runs (null: unknown)
      "config_error": "…",          why it refused the latest document, if it did
      "reachable": true,            its admin endpoint answered
      "status_error": "…",          why not, when unreachable
      "lease_expires_within_seconds": 8    when unreachable: the most time its
                                    lease has left (0: ended; null: reachable,
                                    or unknown)
    }],
    "singletons": [{                where each singleton runs, by type
      "type": "leader", "runner": "r1", "shard": "default/5",
      "running": true, "since": "…", "restarts": 0
    }],
    "shards_owned": 64,             shards with a lock
    "shards_held_unreachable": 0,   of those, held by unreachable runners
    "shards_unowned": 0             shards × groups − shards_owned
  }
`

// StatusReport is the output of `tenure status -o json`. The schema is
// stable: fields may be added, none renamed or removed. Ownership counts
// come from the shard locks in etcd; the runner fields that only a runner
// knows (attached, lag, mode) come from its admin endpoint and are null or
// empty when it cannot be reached.
type StatusReport struct {
	Cluster       string         `json:"cluster"`
	Shards        int            `json:"shards"`         // per group, from the cluster meta
	Groups        []string       `json:"groups"`         // sorted
	ConfigVersion int64          `json:"config_version"` // of the dynamic config in etcd; 0 when none
	ConfigError   string         `json:"config_error,omitempty"`
	Runners       []RunnerReport `json:"runners"` // sorted by id
	ShardsOwned   int            `json:"shards_owned"`
	ShardsUnowned int            `json:"shards_unowned"` // Shards × len(Groups) − ShardsOwned
	// ShardsHeldUnreachable counts the shards of ShardsOwned whose holder
	// did not answer its admin endpoint: a runner killed, hung or cut off
	// whose lease has not ended. Nobody runs their work until the lease
	// ends (see RunnerReport.LeaseExpiresWithinSeconds) or it answers.
	ShardsHeldUnreachable int `json:"shards_held_unreachable"`
	// UnhostedTypes are types with due tasks that a runner left pending
	// for want of a handler and that no runner lists among its types:
	// their tasks wait, and calls to them are answered not applied
	// (type_not_hosted), until a runner hosting them joins. Sorted.
	UnhostedTypes []UnhostedType `json:"unhosted_types"`
	// Singletons lists where each singleton runs, as the runners running
	// them report it (a singleton between owners, or on an unreachable
	// runner, is missing), sorted by type.
	Singletons []SingletonReport `json:"singletons"`
}

// UnhostedType is a type no runner hosts, with the runners that saw its
// tasks.
type UnhostedType struct {
	Type   string   `json:"type"`
	SeenBy []string `json:"seen_by"`
}

// SingletonReport is one running singleton of a StatusReport.
type SingletonReport struct {
	Type     string    `json:"type"`
	Runner   string    `json:"runner"`
	Shard    string    `json:"shard"`
	Running  bool      `json:"running"` // false: between restarts, or stopped by a detachment
	Since    time.Time `json:"since"`
	Restarts int       `json:"restarts"`
}

// RunnerReport is one runner of a StatusReport.
type RunnerReport struct {
	ID      string  `json:"id"`
	Addr    string  `json:"addr"`
	Weight  float64 `json:"weight"`
	Version string  `json:"version"`
	// Types are the task and entity types the runner hosts, sorted, from
	// its membership record (known even when it does not answer); empty
	// for a runner too old to advertise them.
	Types []string `json:"types"`
	// Attached is null when the runner's admin endpoint did not answer.
	Attached *bool `json:"attached"`
	// Owned counts the shard locks the runner holds in etcd.
	Owned int `json:"owned"`
	// LeaseDeadlineLagSeconds is the runner's conservative lease deadline
	// minus now; it detaches when this falls to its detach margin. Null
	// when the runner did not answer.
	LeaseDeadlineLagSeconds *float64 `json:"lease_deadline_lag_seconds"`
	Mode                    string   `json:"mode"`
	DetachReason            string   `json:"detach_reason"`
	// Draining: the runner is handing its shards over (or has weight 0).
	Draining      bool   `json:"draining"`
	ConfigVersion *int64 `json:"config_version"`
	// ConfigError says why it refused the latest dynamic config document
	// it read, if it did: it runs ConfigVersion instead.
	ConfigError string `json:"config_error,omitempty"`
	Reachable   bool   `json:"reachable"`
	StatusError string `json:"status_error,omitempty"`
	// LeaseExpiresWithinSeconds is, for a runner that did not answer, the
	// most time its etcd lease has left unless renewed (etcd counts whole
	// seconds: an upper bound; 0: it has ended). Its shard locks end with
	// it. Null for a runner that answered, or when etcd did not say.
	LeaseExpiresWithinSeconds *float64 `json:"lease_expires_within_seconds"`
}

func newStatusCmd(cli *CLI) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "show runners, shard ownership and the config version",
		Long:  statusLong,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return status(cmd.Context(), cli, cli.wantJSON(cmd))
		},
	}
	addJSONAlias(cmd)
	return cmd
}

// status runs `tenure status`: etcd and the runners' admin endpoints
// only, so a config without S3 settings does.
func status(ctx context.Context, cli *CLI, asJSON bool) error {
	cfg, err := cli.LoadCoordConfig()
	if err != nil {
		return flatten(err)
	}
	conn, err := cli.ConnectCoord(ctx, cfg)
	if err != nil {
		return flatten(err)
	}
	defer conn.Store.Close()
	adm, err := newAdmin(cli, cfg)
	if err != nil {
		return err
	}
	defer adm.close()
	rep, err := gatherStatus(ctx, cli, conn, adm)
	if err != nil {
		return flatten(err)
	}
	if asJSON {
		return writeJSON(cli.Stdout, rep)
	}
	printStatus(cli.Stdout, rep)
	return nil
}

// gatherStatus reads the cluster's meta, runners, locks and config from
// etcd and asks every runner for its state.
func gatherStatus(ctx context.Context, cli *CLI, conn *CoordConn, adm *admin) (*StatusReport, error) {
	runners, _, err := conn.Store.Runners(ctx)
	if err != nil {
		if !errors.Is(err, storage.ErrCorrupt) {
			return nil, err
		}
		fmt.Fprintf(cli.Stderr, "warning: %v\n", flatten(err))
	}
	locks, _, err := conn.Store.ShardLocks(ctx)
	if err != nil {
		if !errors.Is(err, storage.ErrCorrupt) {
			return nil, err
		}
		fmt.Fprintf(cli.Stderr, "warning: %v\n", flatten(err))
	}
	rep := &StatusReport{
		Cluster:       conn.Config.Cluster,
		Shards:        conn.Meta.Shards,
		Groups:        conn.Meta.Groups,
		Runners:       []RunnerReport{},
		Singletons:    []SingletonReport{},
		UnhostedTypes: []UnhostedType{},
	}
	cv, err := conn.Store.Config(ctx)
	if err != nil {
		return nil, err
	}
	if cv.Value != nil {
		doc, err := runner.ParseDynamicDoc(cv.Value)
		rep.ConfigVersion = doc.Version
		if err != nil {
			rep.ConfigError = flatten(err).Error()
		}
	}

	owned := map[string]int{}
	for _, l := range locks {
		if slices.Contains(conn.Meta.Groups, l.Shard.Group) && l.Shard.Index < conn.Meta.Shards {
			owned[l.RunnerID]++
			rep.ShardsOwned++
		}
	}
	rep.ShardsUnowned = conn.Meta.Shards*len(conn.Meta.Groups) - rep.ShardsOwned

	seen := map[string][]string{} // unhandled type → the runners that saw it
	for _, r := range gatherRunners(ctx, adm, conn.Store, runners) {
		rr := RunnerReport{ID: r.ID, Addr: r.Addr, Weight: r.Weight, Version: r.Version, Types: slices.Clone(r.Types),
			Owned: owned[r.ID], Draining: r.Weight == 0}
		if rr.Types == nil {
			rr.Types = []string{}
		}
		if !r.reachable() {
			rr.StatusError = r.adminErr.Error()
			rep.ShardsHeldUnreachable += rr.Owned
			if left, ok := r.leaseLeft(); ok {
				secs := left.Seconds()
				rr.LeaseExpiresWithinSeconds = &secs
			}
		} else {
			st := r.state
			rr.Reachable = true
			rr.Attached, rr.LeaseDeadlineLagSeconds = st.Attached, st.LeaseDeadlineLag
			rr.Mode, rr.DetachReason, rr.ConfigVersion, rr.ConfigError = st.Mode, st.DetachReason, st.ConfigVersion, st.ConfigError
			rr.Draining = rr.Draining || st.Draining
			for _, typ := range st.UnhandledTypes {
				seen[typ] = append(seen[typ], r.ID)
			}
			for _, s := range st.Singletons {
				rep.Singletons = append(rep.Singletons, SingletonReport{Type: s.Type, Runner: r.ID, Shard: s.Shard,
					Running: s.Running, Since: s.Since, Restarts: s.Restarts})
			}
		}
		rep.Runners = append(rep.Runners, rr)
	}
	hosted := map[string]bool{}
	for _, r := range rep.Runners {
		for _, typ := range r.Types {
			hosted[typ] = true
		}
	}
	for _, typ := range slices.Sorted(maps.Keys(seen)) {
		if !hosted[typ] {
			rep.UnhostedTypes = append(rep.UnhostedTypes, UnhostedType{Type: typ, SeenBy: seen[typ]})
		}
	}
	slices.SortFunc(rep.Singletons, func(a, b SingletonReport) int {
		return cmp.Or(strings.Compare(a.Type, b.Type), strings.Compare(a.Runner, b.Runner))
	})
	return rep, nil
}

func printStatus(w io.Writer, rep *StatusReport) {
	cfgVersion := "none"
	if rep.ConfigVersion > 0 {
		cfgVersion = "version " + strconv.FormatInt(rep.ConfigVersion, 10)
	}
	fmt.Fprintf(w, "cluster %s: %d shards × %d group(s) (%s); dynamic config %s\n",
		rep.Cluster, rep.Shards, len(rep.Groups), strings.Join(rep.Groups, ", "), cfgVersion)
	if rep.ConfigError != "" {
		fmt.Fprintf(w, "  the stored dynamic config is invalid (runners ignore it): %s\n", rep.ConfigError)
	}
	fmt.Fprintln(w, shardSummary(rep))
	fmt.Fprintln(w)
	if len(rep.Runners) == 0 {
		fmt.Fprintln(w, "no live runners")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUNNER\tADDRESS\tWEIGHT\tATTACHED\tOWNED\tLEASE LAG\tMODE\tCONFIG\tNOTE")
	for _, r := range rep.Runners {
		attached, lag, mode, config := "unknown", "unknown", "unknown", "unknown"
		if r.Attached != nil {
			attached = "yes"
			if !*r.Attached {
				attached = "no"
			}
		}
		if r.LeaseDeadlineLagSeconds != nil {
			lag = strconv.FormatFloat(*r.LeaseDeadlineLagSeconds, 'f', 1, 64) + "s"
		}
		if r.Reachable {
			mode = orDash(r.Mode)
		}
		if r.ConfigVersion != nil {
			config = strconv.FormatInt(*r.ConfigVersion, 10)
		}
		var notes []string
		if r.DetachReason != "" {
			notes = append(notes, "detached: "+r.DetachReason)
		}
		if r.Draining {
			notes = append(notes, "draining")
		}
		if r.ConfigError != "" {
			notes = append(notes, "refused dynamic config: "+r.ConfigError)
		}
		if r.StatusError != "" {
			note := "admin unreachable: " + r.StatusError
			if r.LeaseExpiresWithinSeconds != nil {
				note += "; " + leaseEnds(*r.LeaseExpiresWithinSeconds)
			}
			notes = append(notes, note)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.ID, orDash(r.Addr),
			strconv.FormatFloat(r.Weight, 'g', -1, 64), attached, r.Owned, lag, mode, config, strings.Join(notes, "; "))
	}
	tw.Flush()
	printRunnerTypes(w, rep.Runners)
	if len(rep.UnhostedTypes) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TYPE NO RUNNER HOSTS\tTASKS WAITING ON")
		for _, u := range rep.UnhostedTypes {
			fmt.Fprintf(tw, "%s\t%s\n", u.Type, strings.Join(u.SeenBy, ", "))
		}
		tw.Flush()
	}
	if len(rep.Singletons) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SINGLETON\tRUNNER\tSHARD\tSTATE\tSINCE\tRESTARTS")
	for _, s := range rep.Singletons {
		state := "running"
		if !s.Running {
			state = "stopped"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", s.Type, s.Runner, s.Shard, state,
			s.Since.UTC().Format(time.RFC3339), s.Restarts)
	}
	tw.Flush()
}

// printRunnerTypes prints the types each runner hosts, a section of its
// own: a list of types does not fit a column of the runners' table.
func printRunnerTypes(w io.Writer, runners []RunnerReport) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUNNER\tTYPES")
	for _, r := range runners {
		types := strings.Join(r.Types, ", ")
		if types == "" {
			types = "(not advertised: an older runner)"
		}
		fmt.Fprintf(tw, "%s\t%s\n", r.ID, types)
	}
	tw.Flush()
}

// shardSummary is the status line on the shards: owned by runners that
// answer, held by runners that do not (and when their leases end at the
// latest), unowned.
func shardSummary(rep *StatusReport) string {
	total := rep.Shards * len(rep.Groups)
	if rep.ShardsHeldUnreachable == 0 {
		return fmt.Sprintf("%d shards: %d owned, %d unowned", total, rep.ShardsOwned, rep.ShardsUnowned)
	}
	latest, known := 0.0, true
	for _, r := range rep.Runners {
		if r.Reachable || r.Owned == 0 {
			continue
		}
		if r.LeaseExpiresWithinSeconds == nil {
			known = false
			continue
		}
		latest = max(latest, *r.LeaseExpiresWithinSeconds)
	}
	lease := "lease time unknown"
	if known {
		lease = leaseEnds(latest)
	}
	return fmt.Sprintf("%d shards: %d owned, %d held by unreachable runners (%s), %d unowned",
		total, rep.ShardsOwned-rep.ShardsHeldUnreachable, rep.ShardsHeldUnreachable, lease, rep.ShardsUnowned)
}

// leaseEnds says when a lease ends at the latest.
func leaseEnds(seconds float64) string {
	if seconds <= 0 {
		return "lease ended"
	}
	return "lease ends in ≤ " + strconv.FormatFloat(seconds, 'f', -1, 64) + "s"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

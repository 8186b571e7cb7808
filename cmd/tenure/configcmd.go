package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
)

const configLong = `The dynamic config (the etcd key /tenure/<cluster>/config, or with
coordination: s3 an object under the S3 prefix + coord/) changes the
detachment settings of running runners without a restart.
`

const configGetLong = `Shows the dynamic config document: its version, the base settings every
runner gets, the canary settings of a change in progress and the percentage
of runners it reaches, and for every live runner its rollout bucket, which
layer it gets, the version it runs and, when it refused a document, why
(from its admin endpoint, GET /debug/status, 1s timeout). -o json prints
the document with its "revision" (etcd's, or the S3 backend's) and "runners": [{"id", "bucket",
"canary", "reachable", "config_version", "config_error"}]
("config_version" null when the runner did not answer).
`

// configSetLong is completed with the dynamic keys.
const configSetLong = `Changes dynamic settings. With --rollout below 100 the change goes to a
canary: the runners whose bucket (xxhash64 of the runner id, mod 100) is
below PCT run it, the others keep the base. Raising PCT only adds runners;
--rollout 100 (the default) makes the change, and any canary in progress,
everyone's base. Without KEY=VALUE, --rollout moves the canary in progress:
'tenure config set --rollout 100' promotes it, --rollout 0 pauses it.

The document is checked before it is written, and nothing is written when
a check fails (exit status 1, one line naming the key and the rule): on its
own (unknown key, bad value), then by every live runner's own check on the
settings it reports (/debug/status "static_config"): a margin that leaves a
runner's keep-alive no time to renew before its cutoff is refused naming
the runner and the bound. A runner whose admin endpoint does not answer is
checked against its lease TTL (as the coordination store says) with the keep-alive settings that
follow from it. Runners that start later check the document themselves.
It is written with a compare-and-swap on its revision, retried when
someone else wrote first. Every write increments the version, which
runners export as tenure_runner_config_version. Then it waits up to 3s for
the runners that answer to apply it, and fails (exit status 1, the document
stays written) if one refuses it.

Typical rollout: detachment.mode=observe --rollout 10, then 50, then 100;
later detachment.mode=enforce the same way.

-o json prints what config get -o json prints, after the write: the new
version, its layers and rollout, and the runners with the layer each gets
and the version each runs.

keys: `

// configCASTries bounds how often `config set` re-reads the document after
// losing a compare-and-swap to another writer (runner.ConfigCASTries).
const configCASTries = runner.ConfigCASTries

func newConfigCmd(cli *CLI) *cobra.Command {
	get := &cobra.Command{
		Use:   "get",
		Short: "show the dynamic config and who runs what",
		Long:  configGetLong,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return configGet(cmd.Context(), cli, cli.wantJSON(cmd))
		},
	}
	addJSONAlias(get)
	var rollout int
	set := &cobra.Command{
		Use:   "set KEY=VALUE... [--rollout PCT]",
		Short: "change settings, for PCT percent of the runners",
		Long:  configSetLong + strings.Join(runner.DynamicKeys, ", "),
		RunE: func(cmd *cobra.Command, args []string) error {
			return configSet(cmd.Context(), cli, args, rollout, flagChanged(cmd.Flags(), "rollout"), cli.wantJSON(cmd))
		},
	}
	set.Flags().IntVar(&rollout, "rollout", 100, "`PCT` of the runners (by bucket) get the change, 0–100")
	return group("config", "get or set (with staged rollout) the dynamic config", configLong, get, set)
}

// ConfigReport is the output of `tenure config get -o json` (and set): the stored
// document (runner.DynamicDoc's fields), its revision (0: absent) and
// the live runners with the layer each gets.
type ConfigReport struct {
	Revision int64 `json:"revision"`
	runner.DynamicDoc
	// Error says why the stored document is invalid (runners ignore it).
	Error   string         `json:"error,omitempty"`
	Runners []ConfigRunner `json:"runners"`
}

// ConfigRunner is a live runner of a ConfigReport.
type ConfigRunner struct {
	ID     string `json:"id"`
	Bucket int    `json:"bucket"` // runner.RolloutBucket of its id
	Canary bool   `json:"canary"` // it gets the canary layer
	// Reachable: its admin endpoint answered.
	Reachable bool `json:"reachable"`
	// ConfigVersion is the version of the document it runs, as it
	// reports it; null when it did not answer.
	ConfigVersion *int64 `json:"config_version"`
	// ConfigError says why it refused the latest document it read, if it
	// did (it then runs ConfigVersion).
	ConfigError string `json:"config_error,omitempty"`
	// StatusError says why it did not answer.
	StatusError string `json:"status_error,omitempty"`
}

// configGet runs `tenure config get`.
func configGet(ctx context.Context, cli *CLI, asJSON bool) error {
	cc, err := cli.configConn(ctx)
	if err != nil {
		return err
	}
	defer cc.close()
	cv, err := cc.rs.Config(ctx)
	if err != nil {
		return err
	}
	rep := &ConfigReport{Revision: cv.Revision}
	if cv.Value != nil {
		if rep.DynamicDoc, err = runner.ParseDynamicDoc(cv.Value); err != nil {
			rep.Error = flatten(err).Error()
		}
	}
	live, err := cc.liveRunners(ctx, cli)
	if err != nil {
		return err
	}
	addRunners(rep, live)
	if asJSON {
		return writeJSON(cli.Stdout, rep)
	}
	printConfig(cli.Stdout, rep)
	return nil
}

// configSet runs `tenure config set`.
func configSet(ctx context.Context, cli *CLI, args []string, rollout int, rolloutSet, asJSON bool) error {
	kv := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return usagef("%q: want KEY=VALUE (keys: %s)", a, strings.Join(runner.DynamicKeys, ", "))
		}
		if _, dup := kv[k]; dup {
			return usagef("%s is given twice", k)
		}
		kv[k] = v
	}
	switch {
	case rollout < 0 || rollout > 100:
		return usagef("--rollout %d: must be a percentage, 0–100", rollout)
	case len(kv) == 0 && !rolloutSet:
		return usagef("nothing to set: give KEY=VALUE… and/or --rollout PCT")
	}
	// Check the change on its own first, so that a bad key or value is
	// reported before connecting to anything.
	if err := changeDoc(runner.DynamicDoc{}, kv, rollout, "", time.Time{}).Check(); err != nil {
		return flatten(err)
	}
	cc, err := cli.configConn(ctx)
	if err != nil {
		return err
	}
	defer cc.close()
	live, err := cc.liveRunners(ctx, cli)
	if err != nil {
		return err
	}
	var notes []string
	check := func(next runner.DynamicDoc) error {
		var refusals []runner.Refusal
		refusals, notes = checkAgainstRunners(next, live)
		if len(refusals) > 0 {
			return refusedError(refusals)
		}
		return nil
	}
	by := whoAmI(cli.Environ)
	doc, rev, err := updateConfig(ctx, cc.rs, func(cur runner.DynamicDoc) (runner.DynamicDoc, error) {
		if len(kv) == 0 && cur.Canary == nil {
			return cur, fmt.Errorf("no canary in progress to move (version %d): give KEY=VALUE to start one", cur.Version)
		}
		return changeDoc(cur, kv, rollout, by, time.Now()), nil
	}, check)
	for _, n := range notes {
		fmt.Fprintln(cli.Stderr, "note: "+n)
	}
	if err != nil {
		return err
	}
	live = awaitApplied(ctx, cc.adm, live, rev)
	rep := &ConfigReport{Revision: rev, DynamicDoc: doc}
	addRunners(rep, live)
	if asJSON {
		err = writeJSON(cli.Stdout, rep)
	} else {
		fmt.Fprintf(cli.Stdout, "wrote dynamic config version %d\n", doc.Version)
		printConfig(cli.Stdout, rep)
	}
	if err != nil {
		return err
	}
	return afterWrite(cli, live, doc.Version, rev)
}

// afterWrite fails when a runner refused the document just written (it
// checked settings the CLI could not see), and notes the runners that
// answer but had not read it by the end of the wait.
func afterWrite(cli *CLI, live []liveRunner, version, rev int64) error {
	var refused, late []string
	for _, r := range live {
		switch {
		case !r.reachable() || r.state.ConfigRevision == nil:
		case *r.state.ConfigRevision < rev:
			late = append(late, r.ID)
		case r.state.ConfigError != "":
			refused = append(refused, r.ID+": "+r.state.ConfigError)
		}
	}
	if len(late) > 0 {
		fmt.Fprintf(cli.Stderr, "note: %s had not read version %d after %s\n", strings.Join(late, ", "), version, runner.ConfigApplyWait)
	}
	if len(refused) == 0 {
		return nil
	}
	return fmt.Errorf("wrote version %d, but %d runner(s) refuse it and keep their settings: %s", version, len(refused), strings.Join(refused, "; "))
}

// awaitApplied is runner.AwaitConfigRead over the CLI's live runners.
func awaitApplied(ctx context.Context, adm *admin, live []liveRunner, rev int64) []liveRunner {
	live = slices.Clone(live)
	infos, sts, errs := make([]storage.RunnerInfo, len(live)), make([]runnerState, len(live)), make([]error, len(live))
	for i, r := range live {
		infos[i], sts[i], errs[i] = r.RunnerInfo, r.state, r.adminErr
	}
	runner.AwaitConfigRead(ctx, infos, sts, errs, rev, func(ctx context.Context, r storage.RunnerInfo) (runnerState, error) {
		return adm.status(ctx, r.Addr)
	})
	for i := range live {
		live[i].state = sts[i]
	}
	return live
}

// configConn is what `config` works with: the cluster's coordination
// store, and the runners' admin endpoints.
type configConn struct {
	rs  storage.RunnerStore
	adm *admin
}

func (c *configConn) close() {
	c.adm.close()
	c.rs.Close()
}

// configConn connects to the cluster's coordination store only: `config`
// needs no task storage (on etcd, no S3 settings at all) nor an
// initialised cluster (the rollout can be staged before the
// first runner starts).
func (c *CLI) configConn(ctx context.Context) (*configConn, error) {
	cfg, err := c.LoadCoordConfig()
	if err != nil {
		return nil, flatten(err)
	}
	adm, err := newAdmin(c, cfg)
	if err != nil {
		return nil, err
	}
	rs, err := c.openCoord(ctx, cfg)
	if err != nil {
		adm.close()
		return nil, flatten(err)
	}
	return &configConn{rs: rs, adm: adm}, nil
}

// liveRunners lists the live runners and asks each for its state.
func (c *configConn) liveRunners(ctx context.Context, cli *CLI) ([]liveRunner, error) {
	runners, _, err := c.rs.Runners(ctx)
	if err != nil {
		if !errors.Is(err, storage.ErrCorrupt) {
			return nil, err
		}
		fmt.Fprintf(cli.Stderr, "warning: %v\n", flatten(err))
	}
	return gatherRunners(ctx, c.adm, c.rs, runners), nil
}

// configStore is the part of the runner store `config set` writes with.
type configStore = runner.DynamicConfigStore

// updateConfig applies change to the stored document and writes it with a
// compare-and-swap, checked first on its own and then by check: the
// shared rule of the CLI and the console (runner.UpdateDynamicConfig).
func updateConfig(ctx context.Context, st configStore, change func(runner.DynamicDoc) (runner.DynamicDoc, error),
	check func(runner.DynamicDoc) error) (runner.DynamicDoc, int64, error) {
	return runner.UpdateDynamicConfig(ctx, st, change, check)
}

// changeDoc returns d after setting kv (key → value) for rollout percent
// of the runners (runner.ChangeDynamicDoc).
func changeDoc(d runner.DynamicDoc, kv map[string]string, rollout int, by string, now time.Time) runner.DynamicDoc {
	return runner.ChangeDynamicDoc(d, runner.DynamicChange{Set: kv, Rollout: rollout, By: by, Now: now})
}

// addRunners adds the live runners to rep: the layer each gets, and the
// version it runs as it reports it.
func addRunners(rep *ConfigReport, live []liveRunner) {
	rep.Runners = []ConfigRunner{}
	for _, r := range live {
		_, canary := rep.For(r.ID)
		cr := ConfigRunner{ID: r.ID, Bucket: runner.RolloutBucket(r.ID), Canary: canary, Reachable: r.reachable()}
		if r.reachable() {
			cr.ConfigVersion, cr.ConfigError = r.state.ConfigVersion, r.state.ConfigError
		} else {
			cr.StatusError = r.adminErr.Error()
		}
		rep.Runners = append(rep.Runners, cr)
	}
}

func printConfig(w io.Writer, rep *ConfigReport) {
	if rep.Revision == 0 {
		fmt.Fprintln(w, "no dynamic config (version 0): runners run their own config")
	} else {
		fmt.Fprintf(w, "dynamic config version %d (revision %d), updated %s by %s\n",
			rep.Version, rep.Revision, rep.UpdatedAt.UTC().Format(time.RFC3339), orDash(rep.UpdatedBy))
	}
	if rep.Error != "" {
		fmt.Fprintf(w, "INVALID, ignored by the runners: %s\n", rep.Error)
	}
	layer := func(title string, m map[string]string) {
		fmt.Fprintln(w, title)
		if len(m) == 0 {
			fmt.Fprintln(w, "  (nothing set: the runners' own config)")
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(w, "  %s = %s\n", k, m[k])
		}
	}
	if rep.Revision != 0 {
		layer("base (every runner not on the canary):", rep.Base)
		if rep.Canary != nil {
			layer(fmt.Sprintf("canary (runners with bucket < %d, i.e. %d%%):", rep.Rollout, rep.Rollout), rep.Canary)
		}
	}
	if len(rep.Runners) == 0 {
		fmt.Fprintln(w, "no live runners")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUNNER\tBUCKET\tGETS\tRUNS\tNOTE")
	for _, r := range rep.Runners {
		gets, runs, note := "base", "unknown", ""
		if r.Canary {
			gets = "canary"
		}
		if r.ConfigVersion != nil {
			runs = "version " + strconv.FormatInt(*r.ConfigVersion, 10)
		}
		switch {
		case r.ConfigError != "":
			note = "refused: " + r.ConfigError
		case !r.Reachable:
			note = "admin unreachable: " + r.StatusError
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", r.ID, r.Bucket, gets, runs, note)
	}
	tw.Flush()
}

// whoAmI names the writer of a config change: user@host.
func whoAmI(environ []string) string {
	name := ""
	for _, key := range []string{"USER=", "LOGNAME="} {
		for _, kv := range environ {
			if v, ok := strings.CutPrefix(kv, key); ok && v != "" && name == "" {
				name = v
			}
		}
	}
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	}
	host, _ := os.Hostname()
	return strings.TrimSuffix(name+"@"+host, "@")
}

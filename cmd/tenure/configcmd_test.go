package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
)

func getConfig(t *testing.T, c *cliCluster) ConfigReport {
	t.Helper()
	var rep ConfigReport
	if err := json.Unmarshal([]byte(c.mustRun(ConfigGet, "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestConfigGetSet(t *testing.T) {
	// No cluster meta: config works before the first runner starts.
	c := newCLICluster(t, false)
	ctx := testCtx(t, 30*time.Second)
	// Live runners, to see who gets what; ids chosen on both sides of 50.
	ids := []string{}
	for i := 0; len(ids) < 4; i++ {
		id := fmt.Sprintf("r%d", i)
		b := runner.RolloutBucket(id)
		if (len(ids) < 2 && b < 50) || (len(ids) >= 2 && b >= 50) {
			ids = append(ids, id)
			s, err := c.etcd.Register(ctx, storage.RunnerInfo{ID: id, Weight: 1, Groups: []string{"default"}}, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(context.Background()) })
			go storage.KeepAliveLoop(context.Background(), s, storage.KeepAliveCadence{}, nil)
		}
	}

	if out := c.mustRun(ConfigGet); !strings.Contains(out, "no dynamic config (version 0)") {
		t.Errorf("config get, nothing set:\n%s", out)
	}
	if rep := getConfig(t, c); rep.Revision != 0 || rep.Version != 0 || len(rep.Runners) != 4 {
		t.Errorf("config get --json, nothing set: %+v", rep)
	}

	out := c.mustRun(ConfigSet, "detachment.mode=observe", "detachment.margin=700ms", "--rollout", "50")
	if !strings.Contains(out, "wrote dynamic config version 1") || !strings.Contains(out, "canary (runners with bucket < 50") {
		t.Errorf("config set --rollout 50:\n%s", out)
	}
	rep := getConfig(t, c)
	if rep.Version != 1 || rep.Rollout != 50 || rep.Canary["detachment.mode"] != "observe" || rep.Canary["detachment.margin"] != "700ms" ||
		len(rep.Base) != 0 || rep.UpdatedBy == "" || !strings.HasPrefix(rep.UpdatedBy, "tester@") {
		t.Errorf("after a 50%% rollout: %+v", rep)
	}
	for _, r := range rep.Runners {
		if r.Canary != (r.Bucket < 50) || r.Bucket != runner.RolloutBucket(r.ID) {
			t.Errorf("runner %s (bucket %d): canary = %v", r.ID, r.Bucket, r.Canary)
		}
	}

	// Moving the canary without a change, then promoting it.
	c.mustRun(ConfigSet, "--rollout", "80")
	if rep := getConfig(t, c); rep.Version != 2 || rep.Rollout != 80 || rep.Canary["detachment.mode"] != "observe" {
		t.Errorf("after --rollout 80: %+v", rep)
	}
	c.mustRun(ConfigSet, "--rollout", "100")
	rep = getConfig(t, c)
	if rep.Version != 3 || rep.Canary != nil || rep.Base["detachment.mode"] != "observe" || rep.Base["detachment.margin"] != "700ms" {
		t.Errorf("after promotion: %+v", rep)
	}
	for _, r := range rep.Runners {
		if r.Canary {
			t.Errorf("runner %s still on a canary after promotion", r.ID)
		}
	}
	_, _, err := c.run(ConfigSet, "--rollout", "30")
	assertOneLine(t, "moving a canary that does not exist", err, "no canary in progress")

	// Refused changes write nothing.
	for _, args := range [][]string{{"detachment.mode=bogus"}, {"nope=1"}, {"detachment.mode=off", "--rollout", "101"}} {
		if _, _, err := c.run(ConfigSet, args...); err == nil {
			t.Errorf("config set %q succeeded", args)
		}
	}
	// These runners do not answer (no admin address): they are checked
	// against their lease TTL in etcd (10s), with the keep-alive settings
	// that follow from it, which leave a 9s margin no time.
	_, _, err = c.run(ConfigSet, "detachment.margin=9s")
	assertOneLine(t, "a margin the runners' leases leave no room for", err, "detachment.margin: 9s is too large for lease.ttl 10s: must be below 5s")
	if err != nil && (!strings.Contains(err.Error(), "refused, nothing written: runner "+slices.Min(ids)+" refuses dynamic config version 4") ||
		!strings.Contains(err.Error(), "did not answer: checked against its lease TTL 10s") || !strings.Contains(err.Error(), "3 other runner(s) refuse it too")) {
		t.Errorf("refusal by unreachable runners: %v", err)
	}
	rep = getConfig(t, c)
	if rep.Version != 3 {
		t.Errorf("refused changes moved the version to %d", rep.Version)
	}
	for _, r := range rep.Runners {
		if r.Reachable || r.ConfigVersion != nil || r.StatusError == "" {
			t.Errorf("runner %s without an admin address: %+v", r.ID, r)
		}
	}

	// A later base change keeps the earlier ones.
	c.mustRun(ConfigSet, "detachment.keepalive_failure_threshold=3")
	if rep := getConfig(t, c); rep.Version != 4 || rep.Base["detachment.keepalive_failure_threshold"] != "3" || rep.Base["detachment.mode"] != "observe" {
		t.Errorf("a second base change lost the first: %+v", rep)
	}

	// An invalid document written behind the CLI's back is shown, not fatal.
	cv, _ := c.etcd.Config(ctx)
	if _, err := c.etcd.PutConfig(ctx, []byte(`{"version":5,"base":{"detachment.mode":"sometimes"},"rollout":100}`), cv.Revision); err != nil {
		t.Fatal(err)
	}
	rep = getConfig(t, c)
	if rep.Version != 5 || !strings.Contains(rep.Error, "detachment.mode") {
		t.Errorf("invalid stored document: %+v", rep)
	}
	if out := c.mustRun(ConfigGet); !strings.Contains(out, "INVALID") {
		t.Errorf("config get of an invalid document:\n%s", out)
	}
	// and a change that overrides the bad key repairs it.
	c.mustRun(ConfigSet, "detachment.mode=enforce")
	if rep := getConfig(t, c); rep.Version != 6 || rep.Error != "" || rep.Base["detachment.mode"] != "enforce" {
		t.Errorf("repairing change: %+v", rep)
	}
}

// racingStore lets another writer change the document between each read
// and write of updateConfig, up to races times.
type racingStore struct {
	configStore
	t     *testing.T
	races int
	n     int
}

func (s *racingStore) PutConfig(ctx context.Context, value []byte, prev int64) (int64, error) {
	if s.n < s.races {
		s.n++
		cv, err := s.configStore.Config(ctx)
		if err != nil {
			s.t.Fatal(err)
		}
		var doc runner.DynamicDoc
		if cv.Value != nil {
			doc, _ = runner.ParseDynamicDoc(cv.Value)
		}
		other := changeDoc(doc, map[string]string{"detachment.recover_window": fmt.Sprintf("%ds", s.n+1)}, 100, "other", time.Now())
		b, _ := json.Marshal(other)
		if _, err := s.configStore.PutConfig(ctx, b, cv.Revision); err != nil {
			s.t.Fatal(err)
		}
	}
	return s.configStore.PutConfig(ctx, value, prev)
}

func TestConfigSetCompareAndSwap(t *testing.T) {
	c := newCLICluster(t, false)
	ctx := testCtx(t, 30*time.Second)
	set := func(cur runner.DynamicDoc) (runner.DynamicDoc, error) {
		return changeDoc(cur, map[string]string{"detachment.mode": "observe"}, 100, "me", time.Now()), nil
	}

	// Two lost races: the third try lands on top of both other writes.
	doc, rev, err := updateConfig(ctx, &racingStore{configStore: c.etcd, t: t, races: 2}, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	cv, _ := c.etcd.Config(ctx)
	stored, err := runner.ParseDynamicDoc(cv.Value)
	if err != nil || cv.Revision != rev || stored.Version != 3 || doc.Version != 3 ||
		stored.Base["detachment.mode"] != "observe" || stored.Base["detachment.recover_window"] != "3s" {
		t.Errorf("after two lost races: stored %+v (revision %d, returned %d), %v", stored, cv.Revision, rev, err)
	}

	// Losing every race gives up with a clear error, after configCASTries.
	rs := &racingStore{configStore: c.etcd, t: t, races: 1000}
	_, _, err = updateConfig(ctx, rs, set, nil)
	assertOneLine(t, "always losing", err, "kept changing")
	if !errors.Is(err, storage.ErrPrecondition) || rs.n != configCASTries {
		t.Errorf("always losing: err = %v after %d tries, want ErrPrecondition after %d", err, rs.n, configCASTries)
	}
}

// TestDynamicDocRollout: a change rolled out to 50% goes to the canary and
// reaches the runners under the hash cut; promoting it makes it everyone's
// base, and a further change layers on top.
func TestDynamicDocRollout(t *testing.T) {
	now := time.Unix(0, 0)
	var d runner.DynamicDoc
	d = changeDoc(d, map[string]string{"detachment.mode": "observe"}, 50, "ops", now)
	if d.Version != 1 || d.Rollout != 50 || d.Canary["detachment.mode"] != "observe" || len(d.Base) != 0 {
		t.Fatalf("canary change: %+v", d)
	}
	if err := d.Check(); err != nil {
		t.Fatal(err)
	}
	base := runner.DefaultConfig()
	base.Etcd.Endpoints, base.S3.Bucket = []string{"x"}, "b"
	on, off := 0, 0
	for i := 0; i < 200; i++ {
		c := base
		c.RunnerID = fmt.Sprintf("r%d", i)
		det, canary, err := d.Apply(c)
		if err != nil {
			t.Fatal(err)
		}
		if canary != (runner.RolloutBucket(c.RunnerID) < 50) {
			t.Fatalf("%s: canary %v, bucket %d", c.RunnerID, canary, runner.RolloutBucket(c.RunnerID))
		}
		if canary {
			on++
			if det.Mode != detachment.ModeObserve {
				t.Fatalf("%s on the canary runs %s", c.RunnerID, det.Mode)
			}
		} else {
			off++
			if det.Mode != detachment.ModeEnforce {
				t.Fatalf("%s off the canary runs %s", c.RunnerID, det.Mode)
			}
		}
	}
	if on < 60 || off < 60 {
		t.Fatalf("50%% rollout split %d/%d", on, off)
	}
	// Promote: everyone gets it; a further canary layers on top.
	d = changeDoc(d, nil, 100, "ops", now)
	if d.Version != 2 || d.Canary != nil || d.Base["detachment.mode"] != "observe" {
		t.Fatalf("promotion: %+v", d)
	}
	d = changeDoc(d, map[string]string{"detachment.recover_window": "5s"}, 10, "ops", now)
	if d.Canary["detachment.mode"] != "observe" || d.Canary["detachment.recover_window"] != "5s" {
		t.Fatalf("layered canary: %+v", d)
	}
}

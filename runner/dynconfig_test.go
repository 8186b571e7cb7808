package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestRolloutBucketSpread(t *testing.T) {
	counts := make([]int, 10)
	for i := 0; i < 10000; i++ {
		counts[RolloutBucket(fmt.Sprintf("runner-%d", i))/10]++
	}
	for i, n := range counts {
		if n < 800 || n > 1200 {
			t.Fatalf("decile %d holds %d of 10000 runners", i, n)
		}
	}
	if RolloutBucket("runner-a") != RolloutBucket("runner-a") {
		t.Fatal("not deterministic")
	}
}

func TestDynamicDocRejects(t *testing.T) {
	for name, raw := range map[string]string{
		"not json":       `{"version":`,
		"unknown field":  `{"version":1,"extra":1}`,
		"static key":     `{"version":1,"base":{"shards":"5"}}`,
		"bad mode":       `{"version":1,"base":{"detachment.mode":"bogus"}}`,
		"bad duration":   `{"version":1,"canary":{"detachment.margin":"soon"},"rollout":5}`,
		"rollout range":  `{"version":1,"rollout":150}`,
		"zero threshold": `{"version":1,"base":{"detachment.keepalive_failure_threshold":"0"}}`,
	} {
		if _, err := ParseDynamicDoc([]byte(raw)); err == nil {
			t.Errorf("%s: accepted %s", name, raw)
		}
	}
	// Valid for the document, too big a margin for this runner's TTL.
	d := DynamicDoc{Version: 3, Base: map[string]string{"detachment.margin": "30s"}}
	raw, _ := json.Marshal(d)
	doc, err := ParseDynamicDoc(raw)
	if err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.Etcd.Endpoints, c.S3.Bucket = []string{"x"}, "b"
	if _, _, err := doc.Apply(c); err == nil || !strings.Contains(err.Error(), "detachment.margin") {
		t.Fatalf("margin 30s against a 10s TTL: %v", err)
	}
	// Below the TTL, but leaving the keep-alive no time to renew before
	// the cutoff (interval + timeout = TTL − margin): refused at run time
	// as at start-up.
	c.Detachment.Margin = Duration(c.Lease.TTL.Std() - c.Lease.KeepAliveInterval.Std() - c.Lease.KeepAliveTimeout.Std())
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "lease.keepalive_interval") {
		t.Fatalf("start-up validation of margin %s: %v", c.Detachment.Margin.Std(), err)
	}
	tight := DynamicDoc{Version: 4, Base: map[string]string{"detachment.margin": c.Detachment.Margin.Std().String()}}
	c = DefaultConfig()
	c.Etcd.Endpoints, c.S3.Bucket = []string{"x"}, "b"
	if _, _, err := tight.Apply(c); err == nil || !strings.Contains(err.Error(), "lease.keepalive_interval") {
		t.Fatalf("dynamic margin %s: %v, want it refused as at start-up", tight.Base["detachment.margin"], err)
	}
}

// TestDynamicDocCheckedAgainstLease: a document is checked against a
// runner's lease settings by the one function the runner and the CLI
// share (ApplyTo); the refusal names the runner, the key and the bound. A
// target rebuilt from what a runner reports is its own.
func TestDynamicDocCheckedAgainstLease(t *testing.T) {
	doc := DynamicDoc{Version: 3, Base: map[string]string{"detachment.margin": "9s"}, Rollout: 100}
	if err := doc.Check(); err != nil {
		t.Fatalf("9s is a valid margin for some lease: %v", err)
	}
	c, err := Load(writeFile(t, minimal+"runner_id: r1\n"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = doc.Apply(c)
	var ref *DynamicRefusal
	if !errors.As(err, &ref) || ref.RunnerID != "r1" || ref.Version != 3 || ref.Canary || !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("margin 9s on a 10s lease: err = %v, want a *DynamicRefusal by r1 of version 3", err)
	}
	const want = "runner r1 refuses dynamic config version 3 (its base layer): detachment.margin: 9s is too large for lease.ttl 10s: " +
		"must be below 5s (lease.ttl 10s − lease.keepalive_interval 3.333s − lease.keepalive_timeout 1.667s), " +
		"or a healthy runner detaches before its next keep-alive can renew the lease"
	if err.Error() != want {
		t.Errorf("refusal:\n got %s\nwant %s", err, want)
	}

	// What the runner reports rebuilds its target, and refuses the same.
	target, err := DynamicTargetFrom("r1", c.StaticSettings())
	if err != nil || target != c.DynamicTarget() {
		t.Fatalf("target from the reported settings: %+v (%v), want %+v", target, err, c.DynamicTarget())
	}
	if _, _, err := doc.ApplyTo(target); err == nil || err.Error() != want {
		t.Errorf("the rebuilt target: %v, want %s", err, want)
	}
	// Known only by its lease TTL: the rest follows it as Load derives it.
	if target, err := DynamicTargetFrom("r1", map[string]string{"lease.ttl": "10s"}); err != nil || target != c.DynamicTarget() {
		t.Errorf("target of a 10s lease: %+v (%v), want %+v", target, err, c.DynamicTarget())
	}
	// A runner with a longer lease takes the same margin.
	long, err := DynamicTargetFrom("r2", map[string]string{"lease.ttl": "30s"})
	if err != nil {
		t.Fatal(err)
	}
	det, _, err := doc.ApplyTo(long)
	if err != nil || det.DetachMargin != 9*time.Second {
		t.Errorf("margin 9s on a 30s lease: %+v, %v", det, err)
	}
	if _, err := DynamicTargetFrom("r3", map[string]string{"lease.ttl": "soon"}); err == nil || !strings.Contains(err.Error(), "lease.ttl") {
		t.Errorf("an unparsable reported setting: %v", err)
	}
	// A margin beyond the TTL says so once, not also as a keep-alive problem.
	_, _, err = DynamicDoc{Version: 4, Base: map[string]string{"detachment.margin": "12s"}}.Apply(c)
	if err == nil || !strings.Contains(err.Error(), "detachment.margin = 12s: must be in (0, lease.ttl 10s)") || strings.Contains(err.Error(), "too large") {
		t.Errorf("margin 12s on a 10s lease: %v", err)
	}
}

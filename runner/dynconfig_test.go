package runner

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
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

package runner

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tenure.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const minimal = `
etcd:
  endpoints: [http://127.0.0.1:2379]
s3:
  bucket: tasks
`

func TestLoadPrecedence(t *testing.T) {
	path := writeFile(t, minimal+`
runner_id: from-file
weight: 2
lease:
  ttl: 20s
detachment:
  recover_window: 3s
`)
	env := []string{"TENURE_RUNNER_ID=from-env", "TENURE_DETACHMENT_RECOVER_WINDOW=4s", "HOME=/x"}
	c, err := Load(path, env, []string{"runner_id=from-flag"})
	if err != nil {
		t.Fatal(err)
	}
	if c.RunnerID != "from-flag" || c.Weight != 2 || c.Detachment.RecoverWindow.Std() != 4*time.Second {
		t.Fatalf("precedence: %+v", c)
	}
	// Keys that follow the TTL do, unless set.
	if c.Lease.TTL.Std() != 20*time.Second || c.Detachment.Margin.Std() != 20*time.Second/3 || c.Lease.KeepAliveInterval.Std() != 20*time.Second/3 {
		t.Fatalf("derived keys: ttl %s margin %s interval %s", c.Lease.TTL, c.Detachment.Margin, c.Lease.KeepAliveInterval)
	}
	if c.AdvertiseAddr != c.AdminAddr {
		t.Fatalf("advertise_addr %q, admin %q", c.AdvertiseAddr, c.AdminAddr)
	}
	if got, _ := c.Get("etcd.endpoints"); got != "http://127.0.0.1:2379" {
		t.Fatalf("Get = %q", got)
	}
}

func TestLoadBadInput(t *testing.T) {
	for name, tc := range map[string]struct {
		file      string
		env, args []string
		want      string
	}{
		"unknown yaml key":  {file: minimal + "bogus: 1\n", want: "bogus"},
		"malformed yaml":    {file: "etcd: [unclosed\n", want: "config file"},
		"invalid duration":  {file: minimal + "lease:\n  ttl: ten\n", want: "ten"},
		"bare number":       {file: minimal, args: []string{"lease.ttl=10"}, want: "lease.ttl"},
		"unknown flag key":  {file: minimal, args: []string{"nope=1"}, want: `unknown key "nope"`},
		"unknown env var":   {file: minimal, env: []string{"TENURE_NOPE=1"}, want: "TENURE_NOPE"},
		"no equals":         {file: minimal, args: []string{"weight"}, want: "key=value"},
		"margin over ttl":   {file: minimal, args: []string{"detachment.margin=20s"}, want: "detachment.margin"},
		"negative weight":   {file: minimal, args: []string{"weight=-1"}, want: "weight"},
		"bad mode":          {file: minimal, args: []string{"detachment.mode=bogus"}, want: "detachment.mode"},
		"missing bucket":    {file: "etcd:\n  endpoints: [x]\n", want: "s3.bucket"},
		"missing endpoints": {file: "s3:\n  bucket: b\n", want: "etcd.endpoints"},
		"half credentials":  {file: minimal, args: []string{"s3.access_key=a"}, want: "s3.access_key"},
		"zero shards":       {file: minimal, args: []string{"shards=0"}, want: "shards"},
		"bad handler":       {file: minimal, args: []string{"handlers=nope"}, want: "TYPE=SPEC"},
		"negative window":   {file: minimal, args: []string{"sharding.acquire_retry_window=-1s"}, want: "acquire_retry_window"},
		"not an int":        {file: minimal, args: []string{"shards=many"}, want: "integer"},
		"missing config":    {file: "", want: "config file"},
	} {
		t.Run(name, func(t *testing.T) {
			path := "/nonexistent/tenure.yaml"
			if tc.file != "" {
				path = writeFile(t, tc.file)
			}
			_, err := Load(path, tc.env, tc.args)
			if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an ErrInvalidConfig naming %q", err, tc.want)
			}
		})
	}
}

func TestKeysAndEnvNames(t *testing.T) {
	keys := Keys()
	for _, want := range []string{"runner_id", "etcd.endpoints", "detachment.mode", "lease.ttl", "entity.max_idle"} {
		found := false
		for _, k := range keys {
			found = found || k == want
		}
		if !found {
			t.Errorf("key %s missing from %v", want, keys)
		}
	}
	if EnvName("detachment.keepalive_failure_threshold") != "TENURE_DETACHMENT_KEEPALIVE_FAILURE_THRESHOLD" {
		t.Fatal(EnvName("detachment.keepalive_failure_threshold"))
	}
}

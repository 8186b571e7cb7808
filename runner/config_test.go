package runner

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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
		"bad env value":     {file: minimal, env: []string{"TENURE_SHARDS=many"}, want: "TENURE_SHARDS"},
		"misspelt env var":  {file: "etcd:\n  endpoints: [x]\n", env: []string{"TENURE_S3_BUCKETT=b"}, want: "s3.bucket = \"\": required\n(ignored environment variables that name no config key: TENURE_S3_BUCKETT)"},
		"no equals":         {file: minimal, args: []string{"weight"}, want: "key=value"},
		"margin over ttl":   {file: minimal, args: []string{"detachment.margin=20s"}, want: "detachment.margin"},
		"negative weight":   {file: minimal, args: []string{"weight=-1"}, want: "weight"},
		"bad mode":          {file: minimal, args: []string{"detachment.mode=bogus"}, want: "detachment.mode"},
		"missing bucket":    {file: "etcd:\n  endpoints: [x]\n", want: "s3.bucket"},
		"missing endpoints": {file: "s3:\n  bucket: b\n", want: "etcd.endpoints"},
		"half credentials":  {file: minimal, args: []string{"s3.access_key=a"}, want: "s3.access_key"},
		"zero shards":       {file: minimal, args: []string{"shards=0"}, want: "shards"},
		"bad handler":       {file: minimal, args: []string{"handlers=nope"}, want: "TYPE=SPEC"},
		"bad singleton":     {file: minimal, args: []string{"singletons=nope"}, want: "singletons = nope: must be TYPE=SPEC"},
		"zero state size":   {file: minimal, args: []string{"entity.max_state_size=0"}, want: "entity.max_state_size = 0: must be in [1, 8388608]"},
		"huge state size":   {file: minimal, args: []string{"entity.max_state_size=9000000"}, want: "entity.max_state_size"},
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

// TestStateAndSingletonKeys: entity.max_state_size reaches the entity
// config (default 1 MiB), and singletons load as a list like handlers.
func TestStateAndSingletonKeys(t *testing.T) {
	c, err := Load(writeFile(t, minimal+"singletons: [\"tick=http://127.0.0.1:1/tick\"]\n"), []string{"TENURE_ENTITY_MAX_STATE_SIZE=4096"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.EntityConfig().MaxStateSize; got != 4096 {
		t.Errorf("entity.max_state_size from the environment: entity config has %d, want 4096", got)
	}
	if !slices.Equal(c.Singletons, []string{"tick=http://127.0.0.1:1/tick"}) {
		t.Errorf("singletons = %q", c.Singletons)
	}
	if got := DefaultConfig().EntityConfig().MaxStateSize; got != 1<<20 {
		t.Errorf("default max_state_size %d, want 1 MiB", got)
	}
}

func TestKeysAndEnvNames(t *testing.T) {
	keys := Keys()
	for _, want := range []string{"runner_id", "etcd.endpoints", "detachment.mode", "lease.ttl", "entity.max_idle", "entity.max_state_size", "singletons"} {
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

// kubernetesEnv is what a Kubernetes Service named "tenure" (port 80) puts
// into the environment of every pod of its namespace.
var kubernetesEnv = []string{
	"TENURE_SERVICE_HOST=10.0.0.1", "TENURE_SERVICE_PORT=80", "TENURE_SERVICE_PORT_HTTP=80",
	"TENURE_PORT=tcp://10.0.0.1:80", "TENURE_PORT_80_TCP=tcp://10.0.0.1:80", "TENURE_PORT_80_TCP_PROTO=tcp",
	"TENURE_PORT_80_TCP_PORT=80", "TENURE_PORT_80_TCP_ADDR=10.0.0.1",
}

// TestLoadIgnoresUnknownEnv: TENURE_* variables that name no key (a
// Kubernetes Service's, an exec: handler's TENURE_TASK_*) are ignored, and
// the runner warns once, naming the others than TENURE_TASK_*.
func TestLoadIgnoresUnknownEnv(t *testing.T) {
	env := append([]string{"TENURE_RUNNER_ID=from-env", "HOME=/x",
		"TENURE_TASK_ID=t1", "TENURE_TASK_REF=default/3/t1", "TENURE_TASK_TYPE=echo", "TENURE_TASK_ENTITY=", "TENURE_TASK_ATTEMPT=1",
		"TENURE_PORT=tcp://10.0.0.1:80"}, kubernetesEnv...) // TENURE_PORT twice: named once
	c, err := Load(writeFile(t, minimal), env, nil)
	if err != nil {
		t.Fatalf("Load with unknown TENURE_* variables: %v", err)
	}
	if c.RunnerID != "from-env" {
		t.Errorf("runner_id = %q: the known variable was not applied", c.RunnerID)
	}
	want := []string{"TENURE_PORT", "TENURE_PORT_80_TCP", "TENURE_PORT_80_TCP_ADDR", "TENURE_PORT_80_TCP_PORT",
		"TENURE_PORT_80_TCP_PROTO", "TENURE_SERVICE_HOST", "TENURE_SERVICE_PORT", "TENURE_SERVICE_PORT_HTTP"}
	if got := c.UnknownEnv(); !slices.Equal(got, want) {
		t.Errorf("UnknownEnv = %q, want %q", got, want)
	}

	var logs bytes.Buffer
	if _, err := New(c, WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "vars="+strings.Join(want, ",")) {
		t.Fatalf("runner logs:\n%s\nwant one warning naming %s", logs.String(), strings.Join(want, ","))
	}
	if strings.Contains(lines[0], "TENURE_TASK_") || strings.Contains(lines[0], "10.0.0.1") {
		t.Errorf("the warning names a TENURE_TASK_* variable or shows a value: %s", lines[0])
	}

	// Without unknown variables, no warning.
	logs.Reset()
	c, err = Load(writeFile(t, minimal), []string{"TENURE_TASK_ID=t1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(c, WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))); err != nil || logs.Len() != 0 {
		t.Errorf("New: %v, logs %q; want no warning", err, logs.String())
	}
}

// TestNoKeyUnderTaskEnvPrefix: a config key whose variable started with
// TENURE_TASK_ would collide with the variables exec: handlers get.
func TestNoKeyUnderTaskEnvPrefix(t *testing.T) {
	for _, k := range Keys() {
		if strings.HasPrefix(EnvName(k), TaskEnvPrefix) {
			t.Errorf("key %s has the variable %s, under the exec handlers' %s", k, EnvName(k), TaskEnvPrefix)
		}
		if got, ok := EnvKey(EnvName(k)); !ok || got != k {
			t.Errorf("EnvKey(%s) = %q, %v; want %s", EnvName(k), got, ok, k)
		}
	}
	if _, ok := EnvKey("TENURE_PORT"); ok {
		t.Error("EnvKey(TENURE_PORT) names a key")
	}
}

// TestValidateEtcdSchemes: TLS settings with an http:// endpoint, which
// the etcd client would use in plain text, are refused naming the setting
// and the endpoint; so are http:// and https:// endpoints together.
func TestValidateEtcdSchemes(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
	}{
		{"ca_file", "etcd:\n  endpoints: [https://a:2379, http://127.0.0.1:2379]\n  ca_file: /etc/tenure/ca.pem\n",
			"etcd.ca_file = /etc/tenure/ca.pem: TLS settings need https:// endpoints, but etcd.endpoints has http://127.0.0.1:2379"},
		{"upper-case scheme", "etcd:\n  endpoints: [HTTP://a:2379]\n  ca_file: /ca.pem\n", "etcd.ca_file = /ca.pem: TLS settings need https:// endpoints, but etcd.endpoints has HTTP://a:2379"},
		{"client certificate", "etcd:\n  endpoints: [http://a:2379]\n  cert_file: /c.pem\n  key_file: /k.pem\n", "etcd.cert_file = /c.pem"},
		{"server name", "etcd:\n  endpoints: [http://a:2379]\n  server_name: etcd.internal\n", "etcd.server_name = etcd.internal"},
		{"mixed schemes", "etcd:\n  endpoints: [http://a:2379, https://b:2379]\n", "etcd.endpoints = http://a:2379,https://b:2379: mixes http://a:2379 and https://b:2379"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFile(t, tc.file+"s3:\n  bucket: b\n"), nil, nil)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an ErrInvalidConfig with %q", err, tc.want)
			}
		})
	}
	// What stays accepted: TLS with https:// or scheme-less endpoints,
	// https:// without a CA file (the system roots), plain http:// without
	// TLS settings.
	for _, file := range []string{
		"etcd:\n  endpoints: [https://a:2379, https://b:2379]\n  ca_file: /ca.pem\n",
		"etcd:\n  endpoints: [a:2379]\n  ca_file: /ca.pem\n",
		"etcd:\n  endpoints: [https://a:2379]\n",
		"etcd:\n  endpoints: [http://a:2379, b:2379]\n",
	} {
		if _, err := Load(writeFile(t, file+"s3:\n  bucket: b\n"), nil, nil); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
}

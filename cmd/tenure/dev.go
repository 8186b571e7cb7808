//go:build !release

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/embedded"
	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/sharding/placement"
	"github.com/tenurehq/tenure/storage"
)

const devLong = `Starts a local cluster in this process: an embedded etcd, an embedded S3
server (VersityGW) and N runners with the built-in handlers (echo, sleep,
counter).
It writes a config file (default ./.tenure-dev/tenure.yaml, else
<data>/tenure.yaml) that every other tenure command picks up when run from
the same directory (elsewhere: --config FILE or TENURE_CONFIG=FILE), so that
` + "`tenure status`" + ` and ` + "`tenure task submit echo --input '{\"x\":1}' --wait`" + ` work with no
flags. Ctrl-C stops it cleanly; the data under --data survives a restart.
--runners 0 starts the infrastructure only, for ` + "`tenure run`" + ` processes; it
writes the cluster meta (64 shards, the groups of --shard-groups, default
"default") as the first runner would, so that tasks can be submitted before
one starts.

--coordination s3 starts no etcd: the runners coordinate through
conditional writes in the embedded S3 bucket (coordination: s3 in the
config it writes), and every other command works the same. The two
backends keep separate coordination records: a --data directory used with
both has a cluster on each, sharing the tasks and entity state in S3, so
pick one per directory.

The config holds a random admin token (admin.token, kept across restarts of
the same --data): the runners require it on their mutating admin endpoints
(drain, pprof) and the other commands send it. It also opens the runners'
HTTP entity calls (call.http.open: POST /v1/entities/... needs no token on
this local cluster). Once the runners have
connected, it prints the endpoints on stdout, with the web console's
address on the first runner (its fragment carries the admin token, which
the page keeps for the session); with -o json, one JSON line: event
"ready", cluster, coordination, etcd ("" on S3), s3, bucket, config,
runners [{id, admin_addr}], console_url. Logs go to stderr.
`

// devFlags are the flags of `tenure dev`.
type devFlags struct {
	runners, adminBase                    int
	data, out, etcdAddr, etcdPeer, s3Addr string
	coordination                          string
	shardGroups                           []string
}

func newDevCmd(cli *CLI) *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "start a local cluster: embedded etcd (unless --coordination s3), embedded S3 and N runners",
		Long:  devLong,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.coordination != runner.CoordinationEtcd && f.coordination != runner.CoordinationS3 {
				return usagef("--coordination %q: must be etcd or s3", f.coordination)
			}
			if f.runners < 0 || f.runners > 50 {
				return usagef("--runners %d: must be in [0, 50]", f.runners)
			}
			for _, g := range f.shardGroups {
				if err := task.ValidateGroup(g); err != nil {
					return usagef("--shard-groups: %v", err)
				}
			}
			return dev(cmd.Context(), cli, f)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&f.runners, "runners", 1, "runners to start in this process (0: infrastructure only)")
	fs.StringVar(&f.data, "data", DevDir, "state directory (etcd and S3 data)")
	fs.StringVar(&f.out, "config-out", "", "config file to write (default <data>/tenure.yaml)")
	fs.StringVar(&f.etcdAddr, "etcd-addr", devEtcdClient, "embedded etcd client address")
	fs.StringVar(&f.etcdPeer, "etcd-peer-addr", devEtcdPeer, "embedded etcd peer address")
	fs.StringVar(&f.s3Addr, "s3-addr", devS3, "embedded S3 address")
	fs.StringVar(&f.coordination, "coordination", runner.CoordinationEtcd, "coordination backend: etcd (embedded) or s3 (the embedded S3 bucket, no etcd)")
	fs.IntVar(&f.adminBase, "admin-base-port", devAdminBase, "admin port of the first in-process runner (the next ones follow)")
	fs.StringSliceVar(&f.shardGroups, "shard-groups", []string{storage.DefaultGroup},
		"the cluster's shard groups (fixed for its life): one per service whose runners host types of their own; the in-process runners serve all")
	return cmd
}

// DevReady is what `tenure dev -o json` prints on one line once its
// runners have connected.
type DevReady struct {
	Event   string `json:"event"` // "ready"
	Cluster string `json:"cluster"`
	// Coordination is the coordination backend: "etcd" or "s3".
	Coordination string `json:"coordination"`
	// Etcd is the embedded etcd's endpoint; "" on S3.
	Etcd   string `json:"etcd"`
	S3     string `json:"s3"`
	Bucket string `json:"bucket"`
	// Config is the config file it wrote (absolute): pass it with
	// --config or TENURE_CONFIG from another directory.
	Config  string           `json:"config"`
	Runners []DevReadyRunner `json:"runners"`
	// ConsoleURL opens the web console on the first runner, with the admin
	// token in the fragment (the page keeps it and the server never sees
	// it); "" without runners.
	ConsoleURL string `json:"console_url"`
}

// DevReadyRunner is one in-process runner of a DevReady.
type DevReadyRunner struct {
	ID        string `json:"id"`
	AdminAddr string `json:"admin_addr"`
}

// dev runs `tenure dev`.
func dev(ctx context.Context, cli *CLI, f devFlags) error {
	defer initTracing(ctx, cli, runner.DefaultServiceName)()
	// The embedded S3 server changes the working directory: resolve every
	// path first.
	dir, err := filepath.Abs(f.data)
	if err != nil {
		return fmt.Errorf("--data: %w", err)
	}
	cfgPath := f.out
	if cfgPath == "" {
		cfgPath = filepath.Join(dir, "tenure.yaml")
	}
	if cfgPath, err = filepath.Abs(cfgPath); err != nil {
		return fmt.Errorf("--config-out: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	token, err := devToken(cfgPath)
	if err != nil {
		return err
	}

	etcdEndpoint := ""
	if f.coordination == runner.CoordinationEtcd {
		etcdSrv, err := embedded.StartEtcd(embedded.EtcdConfig{Dir: filepath.Join(dir, "etcd"), ClientAddr: f.etcdAddr, PeerAddr: f.etcdPeer})
		if err != nil {
			return fmt.Errorf("%w (is another tenure dev running?)", err)
		}
		defer etcdSrv.Close()
		etcdEndpoint = etcdSrv.Endpoint()
	}
	s3Srv, err := embedded.StartS3(embedded.S3Config{Dir: filepath.Join(dir, "s3"), Addr: f.s3Addr, AccessKey: devAccessKey, SecretKey: devSecretKey})
	if err != nil {
		return fmt.Errorf("%w (is another tenure dev running?)", err)
	}
	defer s3Srv.Close()
	if err := ensureBucket(ctx, s3Srv); err != nil {
		return err
	}
	base := devConfig(etcdEndpoint, s3Srv)
	base.ShardGroups = slices.Sorted(slices.Values(f.shardGroups))
	base.Admin.Token = token
	// A local dev cluster: its HTTP entity calls need no credential.
	base.Call.HTTP.Open = true
	if err := initDevMeta(ctx, cli, base); err != nil {
		return err
	}
	if err := writeDevConfig(cfgPath, base); err != nil {
		return err
	}
	ready := DevReady{Event: "ready", Cluster: devCluster, Coordination: base.Coordination, Etcd: etcdEndpoint, S3: s3Srv.Endpoint(), Bucket: devBucket,
		Config: cfgPath, Runners: []DevReadyRunner{}}

	ctx, stop := signalContext(ctx, cli)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, f.runners)
	var started []*runner.Runner
	for i := 1; i <= f.runners; i++ {
		cfg := base
		cfg.RunnerID = "dev-" + strconv.Itoa(i)
		cfg.AdminAddr = "127.0.0.1:" + strconv.Itoa(f.adminBase+i-1)
		cfg.AdvertiseAddr = cfg.AdminAddr
		cfg.DrainTimeout = runner.Duration(5 * time.Second)
		r, err := runner.New(cfg, runner.WithTypes(standardTypes(nil, nil, "")))
		if err != nil {
			stop()
			wg.Wait()
			return err
		}
		ready.Runners = append(ready.Runners, DevReadyRunner{ID: cfg.RunnerID, AdminAddr: cfg.AdminAddr})
		if i == 1 {
			ready.ConsoleURL = consoleURL(cfg.AdminAddr, token)
		}
		started = append(started, r)
		wg.Go(func() {
			if err := r.Run(ctx); err != nil {
				errs <- fmt.Errorf("runner %s: %w", cfg.RunnerID, err)
				stop()
			}
		})
	}
	go func() {
		for _, r := range started {
			if waitReady(ctx, r, true) != nil {
				return
			}
		}
		cli.printReady(ready, func() string { return devText(ready, f.data == DevDir && f.out == "") })
	}()
	<-ctx.Done()
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// devText is what `tenure dev` prints once ready, for people; unless the
// config is where the other commands look by default, it says how to point
// them at it.
func devText(r DevReady, defaultPath bool) string {
	var b strings.Builder
	etcd := r.Etcd
	if etcd == "" {
		etcd = "none (coordination on S3)"
	}
	fmt.Fprintf(&b, "tenure dev: cluster %q\n  etcd   %s\n  s3     %s (bucket %s, path-style, key %s)\n  config %s\n",
		r.Cluster, etcd, r.S3, r.Bucket, devAccessKey, r.Config)
	for _, rr := range r.Runners {
		fmt.Fprintf(&b, "  runner %s admin http://%s\n", rr.ID, rr.AdminAddr)
	}
	if r.ConsoleURL != "" {
		fmt.Fprintf(&b, "  console %s\n", r.ConsoleURL)
	}
	if !defaultPath {
		fmt.Fprintf(&b, "Other tenure commands find this cluster with:\n  export %s=%s\n", ConfigEnv, shellQuote(r.Config))
	}
	b.WriteString("Ctrl-C to stop.")
	return b.String()
}

// consoleURL is the web console's address on the runner at adminAddr,
// with the admin token in the fragment: the page moves it to its session
// storage and off the address bar, and a fragment never reaches the
// server or its logs.
func consoleURL(adminAddr, token string) string {
	u := "http://" + adminAddr + "/ui/"
	if token != "" {
		u += "#token=" + url.QueryEscape(token)
	}
	return u
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r == ':' || r == '+' ||
			('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9'))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// devToken returns the admin token of the dev cluster whose config is at
// path: the one the file already holds, so that a restart keeps it (and
// the shells that read it), else a new random one.
func devToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		var f devFile
		if yaml.Unmarshal(b, &f) == nil && f.Admin.Token != "" {
			return f.Admin.Token, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("generating the admin token: %w", err)
	}
	return hex.EncodeToString(key), nil
}

// initDevMeta writes the dev cluster's meta unless it is there, as its
// first runner would: with --runners 0, the task and call commands then
// work (submitted tasks wait for a runner, and a wait on them says no
// runner took them) before the first `tenure run`, whose config is the
// same file. A meta already there (an earlier start, an older procedure)
// is left for the runners to check.
func initDevMeta(ctx context.Context, cli *CLI, cfg runner.Config) error {
	rs, err := cli.openCoord(ctx, cfg)
	if err != nil {
		return err
	}
	defer rs.Close()
	if _, err := rs.Meta(ctx); !errors.Is(err, storage.ErrNotFound) {
		return err
	}
	_, err = rs.EnsureMeta(ctx, storage.ClusterMeta{Shards: cfg.Shards, Groups: slices.Sorted(slices.Values(cfg.ShardGroups)), Hash: placement.HashName})
	if err != nil {
		return fmt.Errorf("writing the dev cluster's meta: %w", err)
	}
	return nil
}

// devConfig is the config the dev cluster's runners and clients share:
// coordination on etcd at etcdEndpoint, or on S3 when it is "".
func devConfig(etcdEndpoint string, s3 *embedded.S3) runner.Config {
	c := runner.DefaultConfig()
	c.Cluster = devCluster
	c.Shards = devShards
	if etcdEndpoint == "" {
		c.Coordination = runner.CoordinationS3
	} else {
		c.Etcd.Endpoints = []string{etcdEndpoint}
	}
	c.S3.Endpoint = s3.Endpoint()
	c.S3.Region = s3.Region()
	c.S3.Bucket = devBucket
	c.S3.PathStyle = true
	c.S3.AccessKey, c.S3.SecretKey = s3.Credentials()
	return c
}

// devFile is what the dev config file holds: what clients and `tenure run`
// need, nothing runner-specific.
type devFile struct {
	Cluster     string   `yaml:"cluster"`
	Shards      int      `yaml:"shards"`
	ShardGroups []string `yaml:"shard_groups,omitempty"`
	// Coordination is written only for S3: a file without it reads as
	// etcd, as older versions wrote it.
	Coordination string `yaml:"coordination,omitempty"`
	// Etcd is nil on S3, which needs no etcd section.
	Etcd *struct {
		Endpoints []string `yaml:"endpoints"`
	} `yaml:"etcd,omitempty"`
	S3 struct {
		Endpoint  string `yaml:"endpoint"`
		Region    string `yaml:"region"`
		Bucket    string `yaml:"bucket"`
		PathStyle bool   `yaml:"path_style"`
		AccessKey string `yaml:"access_key"`
		SecretKey string `yaml:"secret_key"`
	} `yaml:"s3"`
	// Admin holds the token the dev runners require on their mutating
	// admin endpoints, and the CLI sends.
	Admin struct {
		Token string `yaml:"token"`
	} `yaml:"admin"`
	// Call opens the HTTP entity calls (call.http.open) of the runners
	// that read the file (`tenure run` against the dev cluster).
	Call struct {
		HTTP struct {
			Open bool `yaml:"open"`
		} `yaml:"http"`
	} `yaml:"call"`
}

func writeDevConfig(path string, c runner.Config) error {
	var f devFile
	f.Cluster, f.Shards = c.Cluster, c.Shards
	if !slices.Equal(c.ShardGroups, []string{storage.DefaultGroup}) {
		f.ShardGroups = c.ShardGroups
	}
	if c.UsesEtcd() {
		f.Etcd = &struct {
			Endpoints []string `yaml:"endpoints"`
		}{c.Etcd.Endpoints}
	} else {
		f.Coordination = c.Coordination
	}
	f.S3.Endpoint, f.S3.Region, f.S3.Bucket, f.S3.PathStyle = c.S3.Endpoint, c.S3.Region, c.S3.Bucket, c.S3.PathStyle
	f.S3.AccessKey, f.S3.SecretKey = c.S3.AccessKey, c.S3.SecretKey
	f.Admin.Token = c.Admin.Token
	f.Call.HTTP.Open = c.Call.HTTP.Open
	b, err := yaml.Marshal(f)
	if err != nil {
		return err
	}
	header := "# Written by `tenure dev`: the local cluster's endpoints. Other tenure\n# commands read it by default from this directory.\n"
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append([]byte(header), b...), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

// ensureBucket creates the dev bucket unless it exists.
func ensureBucket(ctx context.Context, s *embedded.S3) error {
	ak, sk := s.Credentials()
	client := awss3.New(awss3.Options{
		BaseEndpoint: aws.String(s.Endpoint()), Region: s.Region(), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(ak, sk, ""),
	})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := client.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: aws.String(devBucket)}); err == nil {
		return nil
	}
	if _, err := client.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(devBucket)}); err != nil {
		return fmt.Errorf("creating bucket %s: %w", devBucket, err)
	}
	return nil
}

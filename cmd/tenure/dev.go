package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"go.yaml.in/yaml/v3"

	"github.com/tenurehq/tenure/internal/embedded"
	"github.com/tenurehq/tenure/runner"
)

// DevDir is where `tenure dev` keeps its state and config by default, and
// where the other commands look for the config.
const DevDir = ".tenure-dev"

// Dev cluster defaults: fixed loopback ports, so that a restart finds the
// same endpoints, and credentials that are obviously not for production.
const (
	devEtcdClient = "127.0.0.1:23790"
	devEtcdPeer   = "127.0.0.1:23791"
	devS3         = "127.0.0.1:23900"
	devAdminBase  = 23910
	devAccessKey  = "tenure-dev"
	devSecretKey  = "tenure-dev-secret"
	devBucket     = "tenure"
	devCluster    = "dev"
	devShards     = 64
)

const devUsage = `usage: tenure dev [flags]

Starts a local cluster in this process: an embedded etcd, an embedded S3
server (VersityGW) and N runners with the built-in handlers (echo, sleep,
counter).
It writes a config file (default ./.tenure-dev/tenure.yaml) that every other
tenure command picks up when run from the same directory, so that
` + "`tenure status`" + ` and ` + "`tenure task submit echo --input '{\"x\":1}' --wait`" + ` work with no
flags. Ctrl-C stops it cleanly; the data under --data survives a restart.
--runners 0 starts the infrastructure only, for ` + "`tenure run`" + ` processes.

flags:
`

// Dev runs `tenure dev`.
func Dev(ctx context.Context, cli *CLI, args []string) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(cli.Stderr)
	runners := fs.Int("runners", 1, "runners to start in this process (0: infrastructure only)")
	data := fs.String("data", DevDir, "state directory (etcd and S3 data)")
	out := fs.String("config-out", "", "config file to write (default <data>/tenure.yaml)")
	etcdAddr := fs.String("etcd-addr", devEtcdClient, "embedded etcd client address")
	etcdPeer := fs.String("etcd-peer-addr", devEtcdPeer, "embedded etcd peer address")
	s3Addr := fs.String("s3-addr", devS3, "embedded S3 address")
	adminBase := fs.Int("admin-base-port", devAdminBase, "admin port of the first in-process runner (the next ones follow)")
	fs.Usage = func() {
		fmt.Fprint(cli.Stderr, devUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("dev: unexpected argument %q", fs.Arg(0))
	}
	if *runners < 0 || *runners > 50 {
		return fmt.Errorf("dev: --runners %d: must be in [0, 50]", *runners)
	}
	defer initTracing(ctx, cli, runner.DefaultServiceName)()
	// The embedded S3 server changes the working directory: resolve every
	// path first.
	dir, err := filepath.Abs(*data)
	if err != nil {
		return fmt.Errorf("dev: --data: %w", err)
	}
	cfgPath := *out
	if cfgPath == "" {
		cfgPath = filepath.Join(dir, "tenure.yaml")
	}
	if cfgPath, err = filepath.Abs(cfgPath); err != nil {
		return fmt.Errorf("dev: --config-out: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("dev: %w", err)
	}

	etcdSrv, err := embedded.StartEtcd(embedded.EtcdConfig{Dir: filepath.Join(dir, "etcd"), ClientAddr: *etcdAddr, PeerAddr: *etcdPeer})
	if err != nil {
		return fmt.Errorf("dev: %w (is another tenure dev running?)", err)
	}
	defer etcdSrv.Close()
	s3Srv, err := embedded.StartS3(embedded.S3Config{Dir: filepath.Join(dir, "s3"), Addr: *s3Addr, AccessKey: devAccessKey, SecretKey: devSecretKey})
	if err != nil {
		return fmt.Errorf("dev: %w (is another tenure dev running?)", err)
	}
	defer s3Srv.Close()
	if err := ensureBucket(ctx, s3Srv); err != nil {
		return err
	}
	base := devConfig(etcdSrv.Endpoint(), s3Srv)
	if err := writeDevConfig(cfgPath, base); err != nil {
		return err
	}
	fmt.Fprintf(cli.Stdout, "tenure dev: cluster %q\n  etcd   %s\n  s3     %s (bucket %s, path-style, key %s)\n  config %s\n",
		devCluster, etcdSrv.Endpoint(), s3Srv.Endpoint(), devBucket, devAccessKey, cfgPath)

	ctx, stop := signalContext(ctx, cli)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, *runners)
	for i := 1; i <= *runners; i++ {
		cfg := base
		cfg.RunnerID = "dev-" + strconv.Itoa(i)
		cfg.AdminAddr = "127.0.0.1:" + strconv.Itoa(*adminBase+i-1)
		cfg.AdvertiseAddr = cfg.AdminAddr
		cfg.DrainTimeout = runner.Duration(5 * time.Second)
		r, err := runner.New(cfg, runner.WithTypes(standardTypes(nil, nil, "")))
		if err != nil {
			return err
		}
		fmt.Fprintf(cli.Stdout, "  runner %s admin http://%s\n", cfg.RunnerID, cfg.AdminAddr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Run(ctx); err != nil {
				errs <- fmt.Errorf("runner %s: %w", cfg.RunnerID, err)
				stop()
			}
		}()
	}
	fmt.Fprintln(cli.Stdout, "Ctrl-C to stop.")
	<-ctx.Done()
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// devConfig is the config the dev cluster's runners and clients share.
func devConfig(etcdEndpoint string, s3 *embedded.S3) runner.Config {
	c := runner.DefaultConfig()
	c.Cluster = devCluster
	c.Shards = devShards
	c.Etcd.Endpoints = []string{etcdEndpoint}
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
	Cluster string `yaml:"cluster"`
	Shards  int    `yaml:"shards"`
	Etcd    struct {
		Endpoints []string `yaml:"endpoints"`
	} `yaml:"etcd"`
	S3 struct {
		Endpoint  string `yaml:"endpoint"`
		Region    string `yaml:"region"`
		Bucket    string `yaml:"bucket"`
		PathStyle bool   `yaml:"path_style"`
		AccessKey string `yaml:"access_key"`
		SecretKey string `yaml:"secret_key"`
	} `yaml:"s3"`
}

func writeDevConfig(path string, c runner.Config) error {
	var f devFile
	f.Cluster, f.Shards = c.Cluster, c.Shards
	f.Etcd.Endpoints = c.Etcd.Endpoints
	f.S3.Endpoint, f.S3.Region, f.S3.Bucket, f.S3.PathStyle = c.S3.Endpoint, c.S3.Region, c.S3.Bucket, c.S3.PathStyle
	f.S3.AccessKey, f.S3.SecretKey = c.S3.AccessKey, c.S3.SecretKey
	b, err := yaml.Marshal(f)
	if err != nil {
		return err
	}
	header := "# Written by `tenure dev`: the local cluster's endpoints. Other tenure\n# commands read it by default from this directory.\n"
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append([]byte(header), b...), 0o600); err != nil {
		return fmt.Errorf("dev: writing %s: %w", path, err)
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
		return fmt.Errorf("dev: creating bucket %s: %w", devBucket, err)
	}
	return nil
}

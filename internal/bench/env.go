package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/tenurehq/tenure/internal/embedded"
	s3store "github.com/tenurehq/tenure/storage/s3"
)

// Embedded servers' settings.
const (
	benchAccessKey = "tenure-bench"
	benchSecretKey = "tenure-bench-secret"
	benchBucket    = "tenure-bench"
	benchRegion    = "us-east-1"
	// setupTimeout bounds starting the servers and creating the bucket.
	setupTimeout = 60 * time.Second
	// s3CloseWait bounds the wait for the embedded gateway to stop.
	s3CloseWait = 2 * time.Second
)

// env is one run's environment: directories, servers, and everything to
// stop at the end, in reverse order of start.
type env struct {
	o        Options
	trials   int
	dir      string // absolute
	tempDir  bool   // dir was made for this run
	runID    string // makes cluster names unique across runs on one etcd
	infra    Infra
	started  bool // infra is set: the servers are up and the bucket exists
	embedded bool // the servers are ours (not Options.Infra)
	exe      string
	progress io.Writer

	mu      sync.Mutex
	closers []func()
	procs   map[*child]struct{} // child processes not yet reaped
	seq     int
}

// newEnv prepares the directories; servers start on first use.
func newEnv(o Options) (*env, error) {
	e := &env{o: o, trials: o.trials(), progress: o.Progress, procs: map[*child]struct{}{}}
	if e.progress == nil {
		e.progress = io.Discard
	}
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("bench: run id: %w", err)
	}
	e.runID = hex.EncodeToString(b[:])
	// The embedded S3 gateway changes the working directory: resolve every
	// path before anything starts.
	if o.DataDir == "" {
		dir, err := os.MkdirTemp("", "tenure-bench-")
		if err != nil {
			return nil, fmt.Errorf("bench: data directory: %w", err)
		}
		e.dir, e.tempDir = dir, true
	} else {
		dir, err := filepath.Abs(o.DataDir)
		if err != nil {
			return nil, fmt.Errorf("bench: --data %s: %w", o.DataDir, err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("bench: --data: %w", err)
		}
		e.dir = dir
	}
	if err := os.MkdirAll(e.logDir(), 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.exe = o.Executable
	if e.exe != "" {
		abs, err := filepath.Abs(e.exe)
		if err != nil {
			return nil, fmt.Errorf("bench: executable %s: %w", e.exe, err)
		}
		e.exe = abs
	}
	return e, nil
}

func (e *env) logDir() string { return filepath.Join(e.dir, "logs") }

// logf writes a progress line.
func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.progress, "bench: "+format+"\n", args...)
}

// onClose registers f to run when the run ends.
func (e *env) onClose(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closers = append(e.closers, f)
}

// close stops everything the run started, children first, then in reverse
// order of start. A run that failed keeps its temporary directory for its
// logs.
func (e *env) close(failed bool) {
	e.killChildren()
	e.mu.Lock()
	fs := e.closers
	e.closers = nil
	e.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	if e.tempDir && !failed {
		os.RemoveAll(e.dir)
	}
}

// servers returns the etcd and S3 to use, starting the embedded ones on
// first call. Runners that coordinate on S3 need no etcd: none is started
// for them (EtcdEndpoint stays empty).
func (e *env) servers(ctx context.Context) (Infra, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return e.infra, nil
	}
	if o := e.o.Infra; o != nil {
		e.infra = *o
		if e.infra.S3Region == "" {
			e.infra.S3Region = benchRegion
		}
		if e.infra.Bucket == "" {
			e.infra.Bucket = benchBucket
		}
	} else {
		etcdEndpoint := ""
		if e.o.onS3() {
			e.logf("starting embedded S3 in %s (coordination on S3: no etcd)", e.dir)
		} else {
			e.logf("starting embedded etcd and S3 in %s", e.dir)
			etcdSrv, err := embedded.StartEtcd(embedded.EtcdConfig{Dir: filepath.Join(e.dir, "etcd"), Fast: true, StartTimeout: setupTimeout})
			if err != nil {
				return Infra{}, fmt.Errorf("bench: %w", err)
			}
			e.closers = append(e.closers, etcdSrv.Close)
			etcdEndpoint = etcdSrv.Endpoint()
		}
		// VersityGW prints a notice on stdout (fmt.Println), where the
		// report goes: point os.Stdout at stderr for the gateway's life.
		// Callers hold their own stdout (the CLI's Stdout is captured at
		// start-up).
		stdout := os.Stdout
		os.Stdout = os.Stderr
		s3Srv, err := embedded.StartS3(embedded.S3Config{Dir: filepath.Join(e.dir, "s3"), AccessKey: benchAccessKey,
			SecretKey: benchSecretKey, Region: benchRegion, StartTimeout: setupTimeout})
		if err != nil {
			os.Stdout = stdout
			return Infra{}, fmt.Errorf("bench: %w", err)
		}
		e.closers = append(e.closers, func() {
			// The gateway's graceful shutdown waits up to 10s for the idle
			// keep-alive connections of the stopped runners' clients; the
			// data is on disk already, so do not wait that long.
			closed := make(chan struct{})
			go func() {
				s3Srv.Close()
				close(closed)
			}()
			select {
			case <-closed:
				os.Stdout = stdout
			case <-time.After(s3CloseWait):
			}
		})
		e.embedded = true
		e.infra = Infra{EtcdEndpoint: etcdEndpoint, S3Endpoint: s3Srv.Endpoint(), S3Region: s3Srv.Region(),
			AccessKey: benchAccessKey, SecretKey: benchSecretKey, Bucket: benchBucket}
	}
	if err := ensureBucket(ctx, e.infra); err != nil {
		e.infra = Infra{}
		return Infra{}, err
	}
	e.started = true
	return e.infra, nil
}

// ensureBucket creates the bucket unless it exists.
func ensureBucket(ctx context.Context, in Infra) error {
	cc := s3store.DefaultClientConfig()
	cc.Endpoint, cc.Region, cc.UsePathStyle = in.S3Endpoint, in.S3Region, true
	cc.AccessKey, cc.SecretKey = in.AccessKey, in.SecretKey
	client, err := s3store.NewClient(ctx, cc)
	if err != nil {
		return fmt.Errorf("bench: s3 %s: %w", in.S3Endpoint, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := client.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: aws.String(in.Bucket)}); err == nil {
		return nil
	}
	_, err = client.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(in.Bucket)})
	var owned interface{ ErrorCode() string }
	if err != nil && errors.As(err, &owned) && owned.ErrorCode() == "BucketAlreadyOwnedByYou" {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("bench: creating bucket %s at %s: %w", in.Bucket, in.S3Endpoint, err)
	}
	return nil
}

// clusterName returns a cluster name unique to this run and scenario.
func (e *env) clusterName(scenario string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seq++
	return fmt.Sprintf("bench-%s-%s-%d", e.runID, scenario, e.seq)
}

// logFile opens a log file under the run's log directory.
func (e *env) logFile(name string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(e.logDir(), name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("bench: log file: %w", err)
	}
	e.onClose(func() { f.Close() })
	return f, nil
}

// logger returns a warn-level logger writing to the named log file.
func (e *env) logger(name string) (*slog.Logger, string, error) {
	f, err := e.logFile(name)
	if err != nil {
		return nil, "", err
	}
	return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelWarn})), f.Name(), nil
}

// safeName makes s usable in a file name.
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == os.PathSeparator || r == ' ' {
			return '_'
		}
		return r
	}, s)
}

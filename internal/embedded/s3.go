package embedded

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/backend/meta"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/embedgw"
)

// S3Config configures an embedded VersityGW gateway.
type S3Config struct {
	Dir       string // state directory; objects live in Dir/data
	Addr      string // host:port to listen on; "" picks a free loopback port
	AccessKey string // root access key; required
	SecretKey string // root secret key; required
	Region    string // reported region; "" = us-east-1
	// StartTimeout bounds the wait for the listener; 0 = 30s.
	StartTimeout time.Duration
}

// S3 is a running embedded VersityGW gateway.
type S3 struct {
	endpoint  string
	region    string
	accessKey string
	secretKey string
	dataDir   string

	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

var s3Running atomic.Bool

// StartS3 starts VersityGW over a POSIX directory and waits until it accepts
// connections. Only one gateway may run per process; the process working
// directory becomes Dir/data for as long as the process lives.
func StartS3(c S3Config) (*S3, error) {
	if c.Dir == "" {
		return nil, errors.New("embedded: s3: Dir is required")
	}
	if c.AccessKey == "" || c.SecretKey == "" {
		return nil, errors.New("embedded: s3: AccessKey and SecretKey are required")
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 30 * time.Second
	}
	if !s3Running.CompareAndSwap(false, true) {
		return nil, errors.New("embedded: s3: a gateway already runs in this process")
	}
	s, err := startS3(c)
	if err != nil {
		s3Running.Store(false)
		return nil, err
	}
	return s, nil
}

func startS3(c S3Config) (*S3, error) {
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return nil, fmt.Errorf("embedded: s3: %w", err)
	}
	dataDir := filepath.Join(dir, "data")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded: s3: %w", err)
	}
	// Attributes (ETags among them) ride on the object file as xattrs, so an
	// object and its ETag become visible together. Fall back to a sidecar
	// directory only where the filesystem has no user xattrs.
	var store meta.MetadataStorer = meta.XattrMeta{}
	if err := (meta.XattrMeta{}).Test(dataDir); err != nil {
		side := filepath.Join(dir, "meta")
		if err := os.MkdirAll(side, 0o755); err != nil {
			return nil, fmt.Errorf("embedded: s3: %w", err)
		}
		sc, err := meta.NewSideCar(side)
		if err != nil {
			return nil, fmt.Errorf("embedded: s3: sidecar %s: %w", side, err)
		}
		store = sc
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		addr := c.Addr
		if addr == "" {
			if addr, err = FreeAddr(); err != nil {
				return nil, err
			}
		}
		// The gateway shuts its backend down when it exits, so every attempt
		// needs a fresh one.
		// CopyObjectThreshold is VersityGW's CLI default (S3's own 5 GiB
		// limit for a single CopyObject); the zero value refuses every copy.
		be, err := posix.New(dataDir, store, posix.PosixOpts{CopyObjectThreshold: 5 << 30})
		if err != nil {
			return nil, fmt.Errorf("embedded: s3: posix backend at %s: %w", dataDir, err)
		}
		s, err := serve(be, c, addr, dataDir)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if c.Addr != "" || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, lastErr
}

func serve(be *posix.Posix, c S3Config, addr, dataDir string) (*S3, error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		gc := &embedgw.Config{
			RootUserAccess:    c.AccessKey,
			RootUserSecret:    c.SecretKey,
			Region:            c.Region,
			Ports:             []string{addr},
			MaxConnections:    4096,
			MaxRequests:       2048,
			MultipartMaxParts: 10000,
			Quiet:             true,
			KeepAlive:         true,
		}
		// The single-account IAM the gateway would pick by default, made
		// here: the gateway's own choice prints a line on stdout, which
		// belongs to `tenure dev` (its -o json ready line).
		gc.IAMService = auth.NewIAMServiceSingle(gc.IamOpts().RootAccount)
		done <- embedgw.RunVersityGW(ctx, be, gc)
	}()
	deadline := time.Now().Add(c.StartTimeout)
	for {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			break
		}
		select {
		case err := <-done:
			cancel()
			if err == nil {
				err = errors.New("gateway exited")
			}
			return nil, fmt.Errorf("embedded: s3 at %s: %w", addr, err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			return nil, fmt.Errorf("embedded: s3 at %s: not listening after %s", addr, c.StartTimeout)
		}
	}
	return &S3{
		endpoint:  "http://" + addr,
		region:    c.Region,
		accessKey: c.AccessKey,
		secretKey: c.SecretKey,
		dataDir:   dataDir,
		cancel:    cancel,
		done:      done,
	}, nil
}

// Endpoint is the gateway's URL, e.g. "http://127.0.0.1:7070".
func (s *S3) Endpoint() string { return s.endpoint }

// Region is the region the gateway reports.
func (s *S3) Region() string { return s.region }

// Credentials returns the root access and secret keys.
func (s *S3) Credentials() (accessKey, secretKey string) { return s.accessKey, s.secretKey }

// DataDir is the directory buckets live in (one sub-directory each).
func (s *S3) DataDir() string { return s.dataDir }

// Close stops the gateway and waits for it to exit. It is idempotent.
func (s *S3) Close() error {
	s.once.Do(func() {
		s.cancel()
		s.err = <-s.done
		s3Running.Store(false)
	})
	return s.err
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/runner"
	"github.com/tenurehq/tenure/storage"
	"github.com/tenurehq/tenure/storage/etcd"
)

// An unreachable etcd or S3 names its endpoint (storage.OpError does),
// fails without waiting out the dial timeout when nothing listens there,
// and, when the config is the one `tenure dev` writes, says to start it.

// probeTimeout bounds the TCP probe of the etcd endpoints that runs beside
// the dial.
const probeTimeout = time.Second

// dialEtcd connects to the configured etcd on the cluster's prefix. The
// etcd client retries a refused connection until etcd.dial_timeout (5s by
// default) has passed, so a TCP probe of the endpoints runs beside the
// dial: when every endpoint refuses the connection or names an unknown
// host, nothing will answer, and the dial fails at once with that.
func (c *CLI) dialEtcd(ctx context.Context, cfg runner.Config) (*etcd.Store, error) {
	dctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		if err := probeEndpoints(dctx, cfg.Etcd.Endpoints); err != nil {
			cancel(err)
		}
	}()
	rs, err := runner.DialEtcd(dctx, cfg)
	if err != nil {
		var dead *deadEndpointsError
		if errors.As(context.Cause(dctx), &dead) {
			return nil, &storage.OpError{Backend: "etcd", Op: "dial", Endpoint: strings.Join(cfg.Etcd.Endpoints, ","),
				Err: storage.Wrap(storage.ErrUnavailable, dead)}
		}
		return nil, err
	}
	return rs, nil
}

// deadEndpointsError says that nothing can answer at any endpoint.
type deadEndpointsError struct{ reasons []string }

func (e *deadEndpointsError) Error() string { return strings.Join(e.reasons, "; ") }

// probeEndpoints opens (and closes) a TCP connection to each endpoint at
// once. It returns a *deadEndpointsError when every one refused the
// connection (nothing listens there) or names a host that does not
// resolve, and nil otherwise: one that connects, or whose probe times
// out, is left to the dial to judge.
func probeEndpoints(ctx context.Context, endpoints []string) error {
	if len(endpoints) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	reasons := make(chan string, len(endpoints))
	for _, ep := range endpoints {
		go func() {
			hostPort := ep
			if u, err := url.Parse(ep); err == nil && u.Host != "" {
				hostPort = u.Host
			}
			conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", hostPort)
			var dnsErr *net.DNSError
			switch {
			case err == nil:
				conn.Close()
				reasons <- ""
			case errors.Is(err, syscall.ECONNREFUSED):
				reasons <- ep + ": connection refused (nothing listens there)"
			case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
				reasons <- ep + ": no such host"
			default:
				reasons <- ""
			}
		}()
	}
	var dead []string
	for range endpoints {
		r := <-reasons
		if r == "" {
			return nil
		}
		dead = append(dead, r)
	}
	slices.Sort(dead)
	return &deadEndpointsError{reasons: dead}
}

// devConfigHeader starts every config file `tenure dev` writes.
const devConfigHeader = "# Written by `tenure dev`"

// isDevConfig reports whether cfg, loaded from path ("" for none), is a
// config `tenure dev` wrote, or points at its default endpoints.
func isDevConfig(path string, cfg runner.Config) bool {
	if path != "" {
		if filepath.Clean(path) == filepath.Clean(devConfigPath) || strings.HasSuffix(filepath.ToSlash(path), "/"+DevDir+"/tenure.yaml") {
			return true
		}
		if f, err := os.Open(path); err == nil {
			head := make([]byte, len(devConfigHeader))
			n, _ := f.Read(head)
			f.Close()
			if bytes.Equal(head[:n], []byte(devConfigHeader)) {
				return true
			}
		}
	}
	for _, ep := range cfg.Etcd.Endpoints {
		if strings.Contains(ep, devEtcdClient) {
			return true
		}
	}
	return strings.Contains(cfg.S3.Endpoint, devS3)
}

// withDevHint adds to an error that says etcd or S3 did not answer, when
// the config is `tenure dev`'s, that the dev cluster is probably not
// running.
func (c *CLI) withDevHint(err error) error {
	if err == nil || !errors.Is(err, storage.ErrUnavailable) || c.loaded == nil || !c.loaded.dev {
		return err
	}
	where := ""
	if c.loaded.path != "" {
		where = " (config " + c.loaded.path + ")"
	}
	return hintError{err: err, hint: "is the local cluster running? start it with `tenure dev`" + where}
}

// hintError is an error with a suggestion after it.
type hintError struct {
	err  error
	hint string
}

func (e hintError) Error() string { return fmt.Sprintf("%v; %s", e.err, e.hint) }
func (e hintError) Unwrap() error { return e.err }

// loadedConfig is what the CLI remembers of the config it loaded, for
// its error messages.
type loadedConfig struct {
	path string // the file ("" for the environment alone)
	dev  bool   // `tenure dev`'s config
}

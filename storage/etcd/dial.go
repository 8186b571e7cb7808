package etcd

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tenurehq/tenure/storage"
)

// DialConfig says how to reach an etcd cluster.
type DialConfig struct {
	Endpoints   []string      // client URLs, e.g. "http://127.0.0.1:2379"; required
	DialTimeout time.Duration // bound on connecting and authenticating; 0 = 5s
	TLS         *tls.Config   // nil for plain connections
	Username    string        // etcd auth user; empty disables auth
	Password    string        // etcd auth password
	// Logger receives the client's own logs; nil discards them.
	Logger *zap.Logger
}

// Dial connects to etcd, checks the connection with a bounded status call on
// the first endpoint that answers, and returns a Store that owns (and will
// close) the client.
func Dial(ctx context.Context, c DialConfig, opts ...Option) (*Store, error) {
	if len(c.Endpoints) == 0 {
		return nil, fmt.Errorf("etcd: dial: %w: no endpoints", storage.ErrInvalid)
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	lg := c.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	endpoint := strings.Join(c.Endpoints, ",")
	dctx, cancel := context.WithTimeout(ctx, c.DialTimeout)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints,
		DialTimeout: c.DialTimeout,
		TLS:         c.TLS,
		Username:    c.Username,
		Password:    c.Password,
		Logger:      lg,
		Context:     context.WithoutCancel(ctx),
	})
	if err != nil {
		return nil, &storage.OpError{Backend: "etcd", Op: "dial", Endpoint: endpoint, Err: classify(ctx, c.DialTimeout, err)}
	}
	var lastErr error
	for _, ep := range c.Endpoints {
		if _, lastErr = cli.Status(dctx, ep); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		cli.Close()
		return nil, &storage.OpError{Backend: "etcd", Op: "dial", Endpoint: endpoint, Err: classify(ctx, c.DialTimeout, lastErr)}
	}
	s, err := New(cli, opts...)
	if err != nil {
		cli.Close()
		return nil, err
	}
	s.ownClient = true
	return s, nil
}

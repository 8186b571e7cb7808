package runner

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/messaging"
	"github.com/tenurehq/tenure/routing"
	"github.com/tenurehq/tenure/storage"
)

// Entity messaging on a runner: a routing table fed by the runner's own
// membership watch, a messaging client that calls entities wherever they
// live (the local ones through the host, without the network), and the
// call server on call.addr that delivers other runners' and clients' calls
// to the host. The shutdown order keeps refusals meaningful: the server
// stops only after the drain, so a caller that reaches this runner while
// its shards move is told "shard moving" or "not owner" (and re-routes),
// never sees a closed connection (an unknown outcome).

// calls is a runner's (or a client's) part of entity messaging.
type calls struct {
	table  *routing.Table
	client *messaging.Client
	http   http.Handler      // the HTTP + JSON path (admin server)
	server *messaging.Server // nil when call.addr is ""
	ln     net.Listener
	stop   context.CancelFunc // ends the table's watch
	done   chan struct{}      // closed when the table's watch has returned
}

// messagingConfig returns the messaging settings of cfg for a cluster of
// shards shards, calling entities of group.
func messagingConfig(cfg Config, shards int, group string) messaging.Config {
	mc := messaging.DefaultConfig()
	mc.Shards = shards
	mc.Group = group
	mc.MaxMessageBytes = cfg.Call.MaxMessageSize
	mc.DefaultTimeout = cfg.Call.Timeout.Std()
	return mc
}

// messaging returns the messaging TLS files of the call.tls settings.
func (t CallTLSConfig) messaging() messaging.TLSConfig {
	return messaging.TLSConfig{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.CAFile,
		RequireClientCert: t.ClientAuth, ServerName: t.ServerName}
}

// clientTLS returns the TLS a caller uses, or nil for plain text.
func (t CallTLSConfig) clientTLS() (*tls.Config, error) {
	if !t.Enabled() {
		return nil, nil
	}
	c, err := t.messaging().ClientTLS()
	if err != nil {
		return nil, fmt.Errorf("%w: call.tls: %w", ErrInvalidConfig, err)
	}
	return c, nil
}

// startCalls starts the routing table's watch on rs and makes the client;
// local, when not nil, delivers calls to the entities runner self owns.
func startCalls(cfg Config, rs storage.MembershipReader, mc messaging.Config, self string, local messaging.Deliverer,
	log *slog.Logger, reg prometheus.Registerer, tp trace.TracerProvider) (*calls, error) {
	ctls, err := cfg.Call.TLS.clientTLS()
	if err != nil {
		return nil, err
	}
	table := routing.New(rs, routing.WithLogger(log))
	opts := []messaging.Option{messaging.WithLogger(log), messaging.WithTracerProvider(tp)}
	if reg != nil {
		opts = append(opts, messaging.WithRegisterer(reg))
	}
	if ctls != nil {
		opts = append(opts, messaging.WithTLS(ctls))
	}
	if local != nil {
		opts = append(opts, messaging.WithLocal(self, local))
	}
	client, err := messaging.NewClient(table, mc, opts...)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	c := &calls{table: table, client: client, http: messaging.HTTPHandler(client), stop: stop, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		if err := table.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("routing table stopped: calls route on its last view", "err", err)
		}
	}()
	return c, nil
}

// serve listens on call.addr and serves calls to d (the host).
func (c *calls) serve(cfg Config, mc messaging.Config, d messaging.Deliverer, log *slog.Logger, reg prometheus.Registerer, tp trace.TracerProvider) error {
	if cfg.Call.Addr == "" {
		return nil
	}
	opts := []messaging.Option{messaging.WithTable(c.table), messaging.WithLogger(log), messaging.WithTracerProvider(tp), messaging.WithRegisterer(reg)}
	if cfg.Call.TLS.Enabled() {
		stls, err := cfg.Call.TLS.messaging().ServerTLS()
		if err != nil {
			return fmt.Errorf("%w: call.tls: %w", ErrInvalidConfig, err)
		}
		opts = append(opts, messaging.WithTLS(stls))
	}
	srv, err := messaging.NewServer(d, mc, opts...)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Call.Addr)
	if err != nil {
		return fmt.Errorf("runner %s: call server on %s (call.addr): %w", cfg.RunnerID, cfg.Call.Addr, err)
	}
	c.server, c.ln = srv, ln
	go func() {
		if err := srv.Serve(ln); err != nil {
			log.Error("call server failed", "err", err)
		}
	}()
	return nil
}

// advertise is the call address to register: call.advertise_addr (New
// derived it when call.addr's host is unspecified), else call.addr, with
// the listener's port for a port 0 ("" when no server runs).
func (c *calls) advertise(cfg Config) string {
	if c == nil || c.ln == nil {
		return ""
	}
	addr := cfg.Call.AdvertiseAddr
	if addr == "" {
		addr = cfg.Call.Addr
	}
	return withBoundPort(addr, c.ln.Addr())
}

// close stops the server (gracefully, within timeout), the client and the
// table's watch.
func (c *calls) close(timeout time.Duration) {
	if c == nil {
		return
	}
	if c.server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		c.server.Stop(ctx)
		cancel()
	}
	c.client.Close()
	c.stop()
	<-c.done
}

// errCallsNotStarted is the error of a call made through a runner whose
// messaging has not started yet (Run has not got that far).
var errCallsNotStarted = errors.New("runner: entity messaging not started")

// Call calls the entity (typ, id) wherever it lives and returns its reply
// (see messaging.Client.Call for the failover rules). A client made by
// Connect starts its messaging on its first call: a routing table fed by a
// watch of the cluster's membership.
func (c *Client) Call(ctx context.Context, typ, id string, body []byte) ([]byte, error) {
	caller, err := c.caller()
	if err != nil {
		return nil, err
	}
	return caller.Call(ctx, typ, id, body)
}

// Send delivers body to the entity (typ, id) without waiting for its
// handler: it returns once the owner has accepted the message.
func (c *Client) Send(ctx context.Context, typ, id string, body []byte) error {
	caller, err := c.caller()
	if err != nil {
		return err
	}
	return caller.Send(ctx, typ, id, body)
}

// Invoke delivers m, a call of the operation m.Op of the entity (m.Type,
// m.ID) or a send if m.OneWay, wherever the entity lives.
func (c *Client) Invoke(ctx context.Context, m *entity.Message) ([]byte, error) {
	caller, err := c.caller()
	if err != nil {
		return nil, err
	}
	return caller.Invoke(ctx, m)
}

func (c *Client) caller() (entity.Caller, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	return c.calls()
}

var _ entity.Caller = (*Client)(nil)

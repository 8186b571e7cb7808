package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// DefaultServeShutdownTimeout is how long Serve waits for the requests in
// flight when it stops its HTTP server, unless ServeShutdownTimeout says
// otherwise.
const DefaultServeShutdownTimeout = 10 * time.Second

// ServeOption configures Serve.
type ServeOption func(*serveOptions)

type serveOptions struct {
	ln       net.Listener
	shutdown time.Duration
}

// ServeListener has Serve serve on ln (which it closes) rather than listen
// on the server's Addr: for a listener made beforehand, on port 0 or
// handed over by systemd.
func ServeListener(ln net.Listener) ServeOption {
	return func(o *serveOptions) { o.ln = ln }
}

// ServeShutdownTimeout bounds the wait for the HTTP requests in flight on
// stop (default DefaultServeShutdownTimeout); those still running then are
// cut off (their connections closed) before the runner stops.
func ServeShutdownTimeout(d time.Duration) ServeOption {
	return func(o *serveOptions) { o.shutdown = d }
}

// Serve runs the runner and a service's HTTP server srv together until ctx
// ends, in the order that keeps both correct, and returns once both have
// stopped:
//
//  1. Run starts the runner; Serve waits until it is registered and
//     serves entity calls (a runner that cannot start ends Serve with its
//     error, before srv serves anything).
//  2. handler, when not nil, is called with the runner's Client (Runner
//     .Client: tasks and entity calls, sharing the runner's connections)
//     and its result becomes srv.Handler; nil keeps srv.Handler.
//  3. srv serves on ServeListener's listener, else on srv.Addr (HTTPS when
//     srv.TLSConfig has a certificate).
//  4. When ctx ends: srv stops accepting and its requests in flight finish
//     (srv.Shutdown, bounded by ServeShutdownTimeout) while the runner
//     still holds its shards, so they get their results; then the runner
//     stops gracefully (its shards handed over, its lease revoked).
//
// A runner that fails while serving stops srv at once (requests in flight
// are cut off: the runner they need is gone); a server that fails stops
// the runner. The error is the server's and the runner's, joined; nil for
// a stop by ctx in which neither failed. Serve calls Run: a runner runs
// once, so Serve after Run (or a second Serve) returns ErrRunAgain.
func (r *Runner) Serve(ctx context.Context, srv *http.Server, handler func(*Client) http.Handler, opts ...ServeOption) error {
	o := serveOptions{shutdown: DefaultServeShutdownTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	closeLn := func() {
		if o.ln != nil {
			o.ln.Close()
		}
	}
	switch {
	case srv == nil:
		closeLn()
		return fmt.Errorf("%w: Serve: nil *http.Server", ErrInvalidConfig)
	case handler == nil && srv.Handler == nil:
		closeLn()
		return fmt.Errorf("%w: Serve: no handler: give a handler factory or set srv.Handler", ErrInvalidConfig)
	case o.shutdown <= 0:
		closeLn()
		return fmt.Errorf("%w: ServeShutdownTimeout(%s): must be > 0", ErrInvalidConfig, o.shutdown)
	}

	// The runner stops when Serve says, not when ctx ends: after srv.
	runCtx, stopRunner := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRunner()
	runErr := make(chan error, 1)
	go func() { runErr <- r.Run(runCtx) }()
	// stopRun stops the runner and returns Run's error; a stop asked
	// while the runner was still starting is no error.
	stopRun := func() error {
		stopRunner()
		err := <-runErr
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return nil
		}
		return err
	}

	select {
	case <-r.life.serving:
	case <-r.life.done:
		closeLn()
		return stopRun()
	case <-ctx.Done():
		closeLn()
		return stopRun()
	}
	if handler != nil {
		c, err := r.Client(ctx)
		if err != nil {
			closeLn()
			return errors.Join(err, stopRun())
		}
		// It shares the runner's connections, which Run closes; closing
		// it makes a late use fail as closed.
		defer c.Close()
		h := handler(c)
		if h == nil {
			closeLn()
			return errors.Join(fmt.Errorf("%w: Serve: the handler factory returned nil", ErrInvalidConfig), stopRun())
		}
		srv.Handler = h
	}
	ln := o.ln
	if ln == nil {
		addr := srv.Addr
		if addr == "" {
			addr = ":http"
		}
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return errors.Join(fmt.Errorf("runner %s: Serve: listening on %s: %w", r.cfg.RunnerID, addr, err), stopRun())
		}
	}
	srvErr := make(chan error, 1)
	go func() {
		if srv.TLSConfig != nil && (len(srv.TLSConfig.Certificates) > 0 || srv.TLSConfig.GetCertificate != nil) {
			srvErr <- srv.ServeTLS(ln, "", "")
			return
		}
		srvErr <- srv.Serve(ln)
	}()

	var httpErr error
	select {
	case <-ctx.Done():
		r.log.Info("stopping: the HTTP server first, then the runner (its shards are handed over)", "shutdown_timeout", o.shutdown)
		sctx, cancel := context.WithTimeout(context.Background(), o.shutdown)
		if err := srv.Shutdown(sctx); err != nil {
			r.log.Warn("HTTP requests cut short at shutdown", "err", err)
			srv.Close()
		}
		cancel()
		<-srvErr
	case err := <-runErr:
		// The runner ended on its own: what the requests need is gone.
		srv.Close()
		<-srvErr
		if err == nil {
			err = fmt.Errorf("runner %s: %w", r.cfg.RunnerID, ErrStopped)
		}
		return err
	case err := <-srvErr:
		httpErr = fmt.Errorf("runner %s: Serve: HTTP server on %s: %w", r.cfg.RunnerID, ln.Addr(), err)
	}
	return errors.Join(httpErr, stopRun())
}

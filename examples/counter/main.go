package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/runner"
)

// defaultConfig is where `tenure dev` writes its config file.
const defaultConfig = ".tenure-dev/tenure.yaml"

// httpShutdownTimeout bounds the wait for in-flight API requests on stop;
// they wait for task results, which the runner (stopped after them) is
// still producing.
const httpShutdownTimeout = 10 * time.Second

func main() {
	if err := mainErr(os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintf(os.Stderr, "counter: %v\n", err)
		os.Exit(1)
	}
}

func mainErr(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("counter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", defaultConfig, "runner config file (written by `tenure dev`)")
	runnerID := fs.String("runner-id", "counter-1", "this runner's id, unique in the cluster")
	adminAddr := fs.String("admin-addr", "", "runner admin HTTP address (/metrics, /readyz, /debug/status); default: the config's admin_addr")
	listen := fs.String("listen", "127.0.0.1:8080", "address of the counter HTTP API")
	wait := fs.Duration("wait", 10*time.Second, "how long an API request waits for its task's result")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: counter [flags]\n\nA Go service embedding a Tenure runner that hosts the \"counter\" entity type,\nwith an HTTP API: POST /counters/{id}/add?n=N.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *wait <= 0 {
		return fmt.Errorf("--wait %s: must be positive", *wait)
	}
	overrides := []string{"runner_id=" + *runnerID}
	if *adminAddr != "" {
		overrides = append(overrides, "admin_addr="+*adminAddr, "advertise_addr="+*adminAddr)
	}
	cfg, err := runner.Load(*cfgPath, os.Environ(), overrides)
	if err != nil {
		if *cfgPath == defaultConfig && errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w (start `tenure dev --runners 0` in this directory first, or pass --config)", err)
		}
		return err
	}
	log := runner.NewLogger(cfg.Log, os.Stderr)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal, restore the default handling: a second
		// one kills the process at once.
		<-ctx.Done()
		stop()
	}()
	svc, err := newService(cfg, log, *wait)
	if err != nil {
		return err
	}
	defer svc.close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", *listen, err)
	}
	log.Info("counter API listening", "addr", ln.Addr().String(), "try", "curl -X POST 'http://"+ln.Addr().String()+"/counters/a/add?n=3'")
	return svc.serve(ctx, ln)
}

// service is the counter service: an embedded runner that hosts the counter
// entity type (and the built-in echo and sleep), and the API that submits
// tasks to the cluster.
type service struct {
	log    *slog.Logger
	runner *runner.Runner
	api    *api
}

// newService builds the runner with the service's types; a bad
// registration fails here. Nothing connects before serve runs the runner.
func newService(cfg runner.Config, log *slog.Logger, wait time.Duration) (*service, error) {
	// The built-in echo and sleep; counter is the service's own.
	r, err := runner.New(cfg, runner.WithLogger(log), runner.WithTypes(func(h *entity.Host) error {
		for _, typ := range []string{runner.TypeEcho, runner.TypeSleep} {
			if err := runner.RegisterBuiltin(h, typ); err != nil {
				return err
			}
		}
		return registerCounter(h, cfg.RunnerID, log)
	}))
	if err != nil {
		return nil, err
	}
	return &service{log: log, runner: r, api: &api{log: log, wait: wait}}, nil
}

// serve runs the runner and serves the API on ln until ctx ends, then stops
// both: the API first, so that requests in flight get their results from
// the still running runner, then the runner, which hands its shards over
// and revokes its lease. A runner that cannot start (etcd or S3
// unreachable, a cluster meta that disagrees) ends serve with its error.
func (s *service) serve(ctx context.Context, ln net.Listener) error {
	runCtx, stopRunner := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRunner()
	runErr := make(chan error, 1)
	go func() { runErr <- s.runner.Run(runCtx) }()

	// The API's task client shares the runner's etcd and S3 connections and
	// places tasks by the cluster meta the runner checked: it is there once
	// the runner has connected.
	client, err := s.runner.Client(ctx)
	if err != nil {
		stopRunner()
		return runResult(ctx, <-runErr)
	}
	s.api.tasks = client
	srv := &http.Server{Handler: s.api.handler(), ReadHeaderTimeout: 5 * time.Second}
	srvErr := make(chan error, 1)
	go func() { srvErr <- srv.Serve(ln) }()

	select {
	case <-ctx.Done():
		s.log.Info("stopping: API first, then the runner (its shards are handed over)")
	case err = <-runErr:
		// Run returns early only when the runner could not start.
		srv.Close()
		<-srvErr
		return err
	case err = <-srvErr:
		err = fmt.Errorf("counter API: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
	if serr := srv.Shutdown(sctx); serr != nil {
		s.log.Warn("counter API requests cut short at shutdown", "err", serr)
		srv.Close()
	}
	cancel()
	stopRunner()
	return errors.Join(err, runResult(ctx, <-runErr))
}

// runResult is Run's error, but none for a stop asked while the runner was
// still starting: nothing to hand over, nothing went wrong.
func runResult(ctx context.Context, err error) error {
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// close releases the API's client. It shares the runner's connections,
// which Run closes: closing it only makes later calls fail clearly.
func (s *service) close() {
	if s.api.tasks != nil {
		s.api.tasks.Close()
	}
}

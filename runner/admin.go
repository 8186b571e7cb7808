package runner

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenurehq/tenure/console"
	"github.com/tenurehq/tenure/console/ui"
	"github.com/tenurehq/tenure/entity"
)

// Status is the runner's state as GET /debug/status reports it.
type Status struct {
	RunnerID         string   `json:"runner_id"`
	Cluster          string   `json:"cluster"`
	Version          string   `json:"version"`
	StartedAt        string   `json:"started_at"`
	Addr             string   `json:"addr"`
	CallAddr         string   `json:"call_addr"` // where it serves entity calls ("" when it serves none)
	Weight           float64  `json:"weight"`
	Draining         bool     `json:"draining"`
	Registered       bool     `json:"registered"`
	LeaseID          string   `json:"lease_id"`
	Attached         bool     `json:"attached"`
	Mode             string   `json:"mode"`
	DetachReason     string   `json:"detach_reason"`
	LeaseDeadlineLag float64  `json:"lease_deadline_lag_seconds"`
	Owned            int      `json:"owned"`
	OwnedShards      []string `json:"owned_shards"`
	Assigned         int      `json:"assigned"`
	Pending          int      `json:"pending"`
	Procedure        string   `json:"procedure"` // the cluster's shard assignment procedure
	ConfigVersion    int64    `json:"config_version"`
	ConfigCanary     bool     `json:"config_canary"`
	ConfigError      string   `json:"config_error"`
	// ConfigRevision is the coordination backend's revision of the latest dynamic config
	// document the runner read, applied or refused (0: none yet).
	ConfigRevision int64 `json:"config_revision"`
	// StaticConfig is the runner's own values (file, environment, flags)
	// of the settings a dynamic config document is checked against: its
	// lease (runner.LeaseKeys) and the dynamic keys. `tenure config set`
	// checks a document against it before writing it.
	StaticConfig map[string]string `json:"static_config"`
	Types        []string          `json:"types"`
	// Singletons lists the singletons of the shards it owns: where they
	// run and since when.
	Singletons []entity.SingletonStatus `json:"singletons"`
	// UnhandledTypes are the types of due tasks it left pending lately
	// for want of a handler (entity.Host.UnhandledTypes).
	UnhandledTypes []string `json:"unhandled_types"`
	// ResidentEntities counts the entity instances in memory.
	ResidentEntities int `json:"resident_entities"`
	// CallsPerSecond and TasksPerSecond are the rates of the entity
	// messages this runner's entities served and of the task attempts
	// that completed here, over the last 10 seconds (null until the
	// runner has measured them).
	CallsPerSecond *float64 `json:"calls_per_second"`
	TasksPerSecond *float64 `json:"tasks_per_second"`
	// RolloutBucket is RolloutBucket(RunnerID): a dynamic config change
	// rolled out to p percent reaches the runner when it is below p.
	RolloutBucket int `json:"rollout_bucket"`
}

// Status returns the runner's state.
func (r *Runner) Status() Status {
	addr := r.advertise()
	r.mu.Lock()
	st := Status{
		RunnerID:       r.cfg.RunnerID,
		Cluster:        r.cfg.Cluster,
		Version:        Version,
		StartedAt:      r.started.UTC().Format(time.RFC3339),
		Addr:           addr,
		Weight:         r.cfg.Weight,
		Draining:       r.draining,
		Registered:     r.registered,
		ConfigVersion:  r.dynamic.version,
		ConfigCanary:   r.dynamic.canary,
		ConfigError:    r.dynamic.err,
		ConfigRevision: r.dynamic.revision,
		StaticConfig:   r.cfg.StaticSettings(),
		CallAddr:       r.calls.advertise(r.cfg),
		RolloutBucket:  RolloutBucket(r.cfg.RunnerID),
	}
	st.CallsPerSecond, st.TasksPerSecond = r.act.rates()
	r.mu.Unlock()
	if st.Draining {
		st.Weight = 0
	}
	mgr, host := r.parts()
	st.Singletons = []entity.SingletonStatus{}
	if host != nil {
		st.Types = host.Types()
		st.Singletons = host.Singletons()
		st.UnhandledTypes = host.UnhandledTypes()
		st.ResidentEntities = host.ResidentCount()
	}
	if mgr == nil {
		return st
	}
	ms := mgr.Status()
	st.Procedure = mgr.Procedure().Name()
	st.Attached = ms.Attached
	st.Mode = string(ms.Detachment.Mode)
	if !ms.Attached {
		st.DetachReason = string(ms.Detachment.Reason)
	}
	if ms.LeaseID != 0 {
		st.LeaseID = strconv.FormatInt(ms.LeaseID, 16)
	}
	if !ms.Detachment.Deadline.IsZero() {
		st.LeaseDeadlineLag = time.Until(ms.Detachment.Deadline).Seconds()
	}
	st.Owned = len(ms.Owned)
	st.OwnedShards = make([]string, 0, len(ms.Owned))
	for _, o := range ms.Owned {
		st.OwnedShards = append(st.OwnedShards, o.Shard.String())
	}
	st.Assigned, st.Pending = len(ms.Assigned), len(ms.Pending)
	st.Registered = st.Registered && ms.LeaseID != 0
	return st
}

// Handler returns the admin HTTP handler: /metrics, /healthz, /readyz
// (200 only when registered and attached), /debug/status and
// /debug/timeline (behind the admin auth when admin.protect_reads), the
// console: its pages under /ui/ and its JSON API under /ui/api/
// (console.go; GET / redirects to /ui/),
// behind the data-plane credential (callauth.go) the entity calls of POST
// /v1/entities/{type}/{id}[/{op}], and, behind the admin auth
// (adminauth.go), POST /admin/drain, GET
// /debug/shards/{group}/{index}/resident and /debug/pprof/.
func (r *Runner) Handler() http.Handler {
	auth := newAdminAuth(r.cfg.Admin, r.log)
	// reads is the access rule of the state the runner shows of itself.
	reads := func(h http.Handler) http.Handler { return h }
	if r.cfg.Admin.ProtectReads {
		reads = auth.require
	}
	mux := http.NewServeMux()
	registerPprof(mux, auth.require)
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.gatherer, promhttp.HandlerOpts{Registry: r.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		st := r.Status()
		ready := st.Registered && st.Attached
		w.Header().Set("Content-Type", "application/json")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		reason := ""
		switch {
		case !st.Registered:
			reason = "not registered"
		case !st.Attached:
			reason = "detached: " + st.DetachReason
		}
		json.NewEncoder(w).Encode(map[string]any{"ready": ready, "reason": reason})
	})
	mux.Handle("GET /debug/status", reads(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(r.Status())
	})))
	mux.Handle("GET /debug/timeline", reads(console.TimelineHandler(r.timeline)))
	// Entity ids are user data: behind the admin auth whatever
	// protect_reads says.
	mux.Handle("GET /debug/shards/{group}/{index}/resident", auth.require(http.HandlerFunc(r.serveResident)))
	// Entity calls over HTTP + JSON, for callers without gRPC: through the
	// runner's messaging client, so any runner reaches every entity. The
	// whole prefix is behind the data-plane credential (callauth.go);
	// messaging's handler routes the call and its operation.
	mux.Handle("POST "+entitiesPrefix, newCallAuth(r.cfg, r.authorize, r.log).require(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		cs := r.calls
		r.mu.Unlock()
		if cs == nil {
			http.Error(w, "not running", http.StatusServiceUnavailable)
			return
		}
		cs.http.ServeHTTP(w, req)
	})))
	mux.Handle("POST /admin/drain", auth.require(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if err := r.startDrain(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintln(w, "draining")
	})))
	if api, err := r.consoleAPI(auth); err != nil {
		r.log.Error("console API not served", "err", err)
	} else {
		// By method, so that the pages' "GET /ui/" does not conflict
		// with the API's prefix: each of these is more specific.
		for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodPut} {
			mux.Handle(method+" "+console.Prefix, api.Handler())
		}
	}
	// The console's pages: static, embedded, open (they hold no data;
	// what they show comes from the API, under its access rules).
	mux.Handle("GET "+ui.Prefix, http.StripPrefix(strings.TrimSuffix(ui.Prefix, "/"), ui.Handler()))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, ui.Prefix, http.StatusFound)
	})
	return mux
}

// startDrain starts a drain in the background, bounded by drain_timeout
// (the admin endpoint's and the console's action).
func (r *Runner) startDrain() error {
	if mgr, _ := r.parts(); mgr == nil {
		return fmt.Errorf("runner %s: %w", r.cfg.RunnerID, console.ErrNotRunning)
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.DrainTimeout.Std())
		defer cancel()
		if err := r.Drain(ctx); err != nil {
			r.log.Warn("drain requested over HTTP did not complete", "err", err)
		}
	}()
	return nil
}

func (r *Runner) startAdmin() error {
	if r.cfg.AdminAddr == "" {
		return nil
	}
	stls, err := r.cfg.Admin.serverTLS(r.log)
	if err != nil {
		return fmt.Errorf("runner %s: admin server: %w", r.cfg.RunnerID, err)
	}
	ln, err := net.Listen("tcp", r.cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("runner %s: admin server on %s: %w", r.cfg.RunnerID, r.cfg.AdminAddr, err)
	}
	if stls != nil {
		ln = tls.NewListener(ln, stls)
	}
	srv := &http.Server{Handler: r.Handler(), ReadHeaderTimeout: 5 * time.Second, TLSConfig: stls}
	r.mu.Lock()
	r.ln, r.admin = ln, srv
	r.mu.Unlock()
	go func() {
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			r.log.Error("admin server failed", "err", err)
		}
	}()
	return nil
}

func (r *Runner) stopAdmin() {
	r.mu.Lock()
	srv := r.admin
	r.mu.Unlock()
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
}

// advertise is the admin address to register: advertise_addr (New derived
// it when admin_addr's host is unspecified), with the listener's port for
// a port 0, as an https:// URL when the admin server serves TLS so that
// clients know to use it.
func (r *Runner) advertise() string {
	r.mu.Lock()
	ln := r.ln
	r.mu.Unlock()
	var bound net.Addr
	if ln != nil {
		bound = ln.Addr()
	}
	addr := withBoundPort(r.cfg.AdvertiseAddr, bound)
	if addr != "" && r.cfg.Admin.CertFile != "" {
		addr = "https://" + addr
	}
	return addr
}

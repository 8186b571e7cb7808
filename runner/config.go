package runner

import (
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/tenurehq/tenure/detachment"
	"github.com/tenurehq/tenure/entity"
	"github.com/tenurehq/tenure/sharding"
	"github.com/tenurehq/tenure/storage/s3coord"
)

// ErrInvalidConfig is wrapped by every configuration error.
var ErrInvalidConfig = errors.New("runner: invalid config")

// Config is a runner's whole configuration. It loads from YAML (keys as the
// yaml tags below), from TENURE_* environment variables (the key path in
// upper case with "_" for "." and "-", e.g. TENURE_ETCD_ENDPOINTS) and from
// flags (--set key=value and the dedicated ones); flags win over the
// environment, which wins over the file. Durations are human strings ("10s").
type Config struct {
	// Cluster names the cluster: its etcd prefix is /tenure/<cluster>/ and
	// its S3 prefix tenure/<cluster>/. Default "default".
	Cluster string `yaml:"cluster"`
	// RunnerID identifies this runner; stable across restarts. Default the
	// host name.
	RunnerID string `yaml:"runner_id"`
	// Weight is this runner's share of the shards relative to the others; 0
	// drains it. Default 1.
	Weight float64 `yaml:"weight"`
	// Groups are the shard groups this runner serves; empty serves all.
	Groups []string `yaml:"groups"`
	// Shards is the number of shards per group, fixed for the cluster's
	// life (checked against the cluster meta). Default 256.
	Shards int `yaml:"shards"`
	// ShardGroups are the cluster's shard groups. Default ["default"].
	ShardGroups []string `yaml:"shard_groups"`
	// AdminAddr is where the admin HTTP server listens (/metrics, /healthz,
	// /readyz, /debug/status); "" disables it. Default 127.0.0.1:9310.
	AdminAddr string `yaml:"admin_addr"`
	// AdvertiseAddr is the admin address other processes reach this runner
	// at, recorded in its registration. Default: AdminAddr, with the host
	// derived (advertise.go) when AdminAddr's is unspecified.
	AdvertiseAddr string `yaml:"advertise_addr"`
	// Handlers are the task handlers of a standalone runner, TYPE=SPEC
	// (http:URL or exec:COMMAND); the built-in echo and sleep are always
	// there. New does not register them: `tenure run` does, with package
	// external, which an embedding service may use too.
	Handlers []string `yaml:"handlers"`
	// Singletons are the singleton entity types of a standalone runner,
	// TYPE=SPEC (http:URL or exec:COMMAND, as handlers): one instance per
	// cluster, started on the owner of its shard. New does not register
	// them: `tenure run` does, with package external.
	Singletons []string `yaml:"singletons"`
	// DrainTimeout bounds the graceful stop's handoff. Default 30s.
	DrainTimeout Duration `yaml:"drain_timeout"`
	// Coordination is where runners register, hold their shard locks and
	// read the dynamic config: "etcd" (the default; the etcd section says
	// how to reach it) or "s3" (conditional writes in the S3 bucket, under
	// the S3 prefix + "coord/"; no etcd section needed, the s3coord
	// section tunes it). Every runner and client of a cluster must name
	// the same one: the two keep separate records.
	Coordination string `yaml:"coordination"`

	Etcd       EtcdConfig       `yaml:"etcd"`
	S3         S3Config         `yaml:"s3"`
	S3Coord    S3CoordConfig    `yaml:"s3coord"`
	Lease      LeaseConfig      `yaml:"lease"`
	Detachment DetachmentConfig `yaml:"detachment"`
	Sharding   ShardingConfig   `yaml:"sharding"`
	Entity     EntityConfig     `yaml:"entity"`
	Call       CallConfig       `yaml:"call"`
	Log        LogConfig        `yaml:"log"`
	Tracing    TracingConfig    `yaml:"tracing"`
	Admin      AdminConfig      `yaml:"admin"`

	// unknownEnv are the TENURE_* variables Load ignored (see UnknownEnv).
	unknownEnv []string
}

// EtcdConfig says how to reach etcd.
type EtcdConfig struct {
	Endpoints      []string `yaml:"endpoints"`       // client URLs; required
	Username       string   `yaml:"username"`        // etcd auth; empty disables
	Password       string   `yaml:"password"`        //
	CAFile         string   `yaml:"ca_file"`         // TLS: CA bundle; enables TLS (not with http:// endpoints)
	CertFile       string   `yaml:"cert_file"`       // TLS client certificate
	KeyFile        string   `yaml:"key_file"`        // TLS client key
	ServerName     string   `yaml:"server_name"`     // TLS server name override
	DialTimeout    Duration `yaml:"dial_timeout"`    // default 5s
	RequestTimeout Duration `yaml:"request_timeout"` // every call but keep-alives; default 5s
}

// checkSchemes refuses endpoints that would not connect the way the
// settings say. etcd's client speaks plain text to an http:// endpoint
// whatever its TLS settings, and uses the first endpoint's scheme for all
// the endpoints: TLS settings with an http:// endpoint, or http:// and
// https:// endpoints together, would silently run (partly) in plain text.
// An endpoint without scheme (host:port) uses TLS when it is configured;
// https:// endpoints without a CA file use the system roots.
func (e EtcdConfig) checkSchemes() error {
	var plain, secure string
	for _, ep := range e.Endpoints {
		scheme, _, ok := strings.Cut(ep, "://")
		switch {
		case !ok:
		case strings.EqualFold(scheme, "http") && plain == "":
			plain = ep
		case strings.EqualFold(scheme, "https") && secure == "":
			secure = ep
		}
	}
	if plain == "" {
		return nil
	}
	for _, f := range []struct{ key, value string }{
		{"etcd.ca_file", e.CAFile}, {"etcd.cert_file", e.CertFile}, {"etcd.key_file", e.KeyFile}, {"etcd.server_name", e.ServerName},
	} {
		if f.value != "" {
			return fmt.Errorf("%w: %s = %s: TLS settings need https:// endpoints, but etcd.endpoints has %s, to which the etcd client would speak plain text (use https://, or host:port without scheme)",
				ErrInvalidConfig, f.key, f.value, plain)
		}
	}
	if secure != "" {
		return fmt.Errorf("%w: etcd.endpoints = %s: mixes %s and %s; the etcd client would use the first endpoint's scheme for all of them (use https:// throughout)",
			ErrInvalidConfig, strings.Join(e.Endpoints, ","), plain, secure)
	}
	return nil
}

// S3Config says how to reach the object store.
type S3Config struct {
	Endpoint string `yaml:"endpoint"` // e.g. http://127.0.0.1:23900; empty: AWS for the region
	// Region signs the requests. Default: the AWS chain (AWS_REGION, then
	// AWS_DEFAULT_REGION, then the region of the shared config profile,
	// AWS_PROFILE or "default", in AWS_CONFIG_FILE or ~/.aws/config), else
	// us-east-1.
	Region    string `yaml:"region"`
	Bucket    string `yaml:"bucket"`     // required
	Prefix    string `yaml:"prefix"`     // key prefix; default tenure/<cluster>/
	PathStyle bool   `yaml:"path_style"` // path-style addressing (most non-AWS servers)
	// Static credentials; all empty: the default AWS credential chain.
	AccessKey      string   `yaml:"access_key"`
	SecretKey      string   `yaml:"secret_key"`
	SessionToken   string   `yaml:"session_token"`
	RequestTimeout Duration `yaml:"request_timeout"` // default 10s
}

// Coordination backends (Config.Coordination).
const (
	// CoordinationEtcd coordinates through etcd: leases, watches.
	CoordinationEtcd = "etcd"
	// CoordinationS3 coordinates through conditional writes in the S3
	// bucket, polled: no server beside the bucket.
	CoordinationS3 = "s3"
)

// S3CoordConfig tunes coordination on S3 (coordination: s3); unused on
// etcd. The poll interval bounds how soon a runner sees another's change
// (a join, a released or expired lock, a dynamic config write, a wake-up):
// it polls at PollMin right after a change and backs off towards PollMax
// while nothing changes. A shorter PollMax costs more LIST requests per
// idle runner; a longer one slows failover and handoff.
type S3CoordConfig struct {
	PollMin Duration `yaml:"poll_min"` // default 100ms
	PollMax Duration `yaml:"poll_max"` // default 2s; below lease.ttl
}

// UsesEtcd reports whether the config coordinates through etcd.
func (c Config) UsesEtcd() bool { return c.Coordination != CoordinationS3 }

// LeaseConfig tunes the runner lease. The keep-alive interval and timeout
// left zero follow the TTL (Config.WithDefaults).
type LeaseConfig struct {
	TTL               Duration `yaml:"ttl"`                // default 10s; whole seconds
	KeepAliveInterval Duration `yaml:"keepalive_interval"` // 0: ttl/3
	KeepAliveTimeout  Duration `yaml:"keepalive_timeout"`  // 0: ttl/6
}

// DetachmentConfig is the part of detachment.Config that can also change
// at run time (see the dynamic config).
type DetachmentConfig struct {
	Mode              string   `yaml:"mode"`                        // off | observe | enforce (default)
	Margin            Duration `yaml:"margin"`                      // 0: lease.ttl/3
	RecoverWindow     Duration `yaml:"recover_window"`              // default 2s
	FailureThreshold  int      `yaml:"keepalive_failure_threshold"` // default 2
	StorageErrorGrace Duration `yaml:"storage_error_grace"`         // default 1s
}

// ShardingConfig tunes the shard loops.
type ShardingConfig struct {
	RebalanceDebounce    Duration `yaml:"rebalance_debounce"`     // default 250ms
	RebalanceInterval    Duration `yaml:"rebalance_interval"`     // default 10s
	LockRefreshInterval  Duration `yaml:"lock_refresh_interval"`  // 0: lease.ttl/3
	AcquireRetryInterval Duration `yaml:"acquire_retry_interval"` // default 200ms
	AcquireRetryWindow   Duration `yaml:"acquire_retry_window"`   // default 2s
	InterruptTimeout     Duration `yaml:"interrupt_timeout"`      // default 5s
}

// EntityConfig tunes the entity host.
type EntityConfig struct {
	ReconcileInterval      Duration `yaml:"reconcile_interval"`        // default 60s
	ReconcileMaxInterval   Duration `yaml:"reconcile_max_interval"`    // default 1h; see entity.Config.ReconcileMaxInterval
	TaskLease              Duration `yaml:"task_lease"`                // default 30s
	MaxConcurrentPerShard  int      `yaml:"max_concurrent_per_shard"`  // default 64
	MaxConcurrentPerRunner int      `yaml:"max_concurrent_per_runner"` // default 256
	MaxIdle                Duration `yaml:"max_idle"`                  // default 60s
	MaxResident            int      `yaml:"max_resident"`              // default 10000
	MaxInputSize           int      `yaml:"max_input_size"`            // bytes; default 256 KiB
	// SendTimeout bounds the handler of a send (a one-way message), which
	// no caller waits for. Default 1m.
	SendTimeout Duration `yaml:"send_timeout"`
	// TaskRetention is how long a finished (completed, failed or
	// cancelled) task is kept after its last write, in S3 time, before its
	// shard's owner deletes it; 0 keeps finished tasks forever. Default
	// 168h (7 days; write hours, Go durations have no days). Cost per idle
	// shard: one LIST per task_sweep_interval; per deleted task: one GET
	// and one DELETE (plus one PUT if it failed or was cancelled). See
	// entity.Config.TaskRetention.
	TaskRetention Duration `yaml:"task_retention"`
	// TaskSweepInterval is how often each owned shard is swept for finished
	// tasks older than task_retention; 0 (the default) derives it as
	// task_retention/24 within [1s, 1h].
	TaskSweepInterval Duration `yaml:"task_sweep_interval"`
	// MaxStateSize is the largest durable entity state, in bytes of its
	// JSON encoding; a larger Save fails with entity.ErrStateTooLarge and
	// writes nothing. Default 1 MiB, at most entity.MaxStateSizeLimit.
	MaxStateSize int `yaml:"max_state_size"`
	// PlainWakeNotes makes this process's submissions send bare wake-up
	// notes (the pointer key), without the task's body and ETag that let
	// the owner claim without a GET. Set it on every process while runners
	// older than those notes remain (they ignore a note they cannot parse,
	// so their tasks would wait for the next reconciliation); default off.
	PlainWakeNotes bool `yaml:"plain_wake_notes"`
}

// LogConfig selects the log output.
type LogConfig struct {
	Level  string `yaml:"level"`  // debug | info (default) | warn | error
	Format string `yaml:"format"` // text (default) | json
}

// AdminConfig secures the admin API's mutating endpoints (POST
// /admin/drain), pprof, the user-data endpoints (the console's entity and
// task views, a shard's resident entities) and the console's actions;
// /metrics, /healthz, /readyz, /debug/status, /debug/timeline and the
// console's shape views stay open unless ProtectReads. The CLI reads the
// same keys to authenticate.
type AdminConfig struct {
	// Token is the bearer token mutating requests must carry
	// (Authorization: Bearer TOKEN); secret, prefer TokenFile or the
	// TENURE_ADMIN_TOKEN variable.
	Token string `yaml:"token"`
	// TokenFile holds the token (a mounted Secret); read when needed, so a
	// rotated file takes effect without a restart.
	TokenFile string `yaml:"token_file"`
	// CertFile and KeyFile make the admin server serve HTTPS (reloaded
	// when the files change); ClientCAFile then verifies client
	// certificates, which authorise mutating requests without a token.
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"`
	// CAFile, ClientCertFile and ClientKeyFile are the CLI's side of an
	// HTTPS admin server (see AdminTLSClientConfig).
	CAFile         string `yaml:"ca_file"`
	ClientCertFile string `yaml:"client_cert_file"`
	ClientKeyFile  string `yaml:"client_key_file"`
	// ProtectReads makes /debug/status, /debug/timeline and the console's
	// shape views (cluster, shards, timeline, schedules, config) need the
	// admin credential too; /metrics, /healthz and /readyz stay open. It
	// needs a credential configured (Token, TokenFile or ClientCAFile).
	ProtectReads bool `yaml:"protect_reads"`
}

// BearerToken returns the admin token: Token, else TokenFile's content
// without surrounding white space, else "".
func (a AdminConfig) BearerToken() (string, error) {
	return readToken("admin.token_file", a.Token, a.TokenFile)
}

// readToken returns token, else the content of file without surrounding
// white space, else ""; fileKey names file's key in errors.
func readToken(fileKey, token, file string) (string, error) {
	if token != "" || file == "" {
		return token, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrInvalidConfig, fileKey, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// TracingConfig selects where spans go, the deprecated way: use the
// standard OTEL_* variables (see InitTracing), which win over it.
type TracingConfig struct {
	// OTLPEndpoint, host:port of an OTLP/gRPC collector; empty exports
	// nothing (unless OTEL_* variables say otherwise).
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	Insecure     bool   `yaml:"insecure"` // plain gRPC to the collector
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "runner"
	}
	sc := sharding.DefaultConfig()
	ec := entity.DefaultConfig()
	return Config{
		Cluster:      "default",
		RunnerID:     sanitizeID(host),
		Weight:       1,
		Shards:       256,
		ShardGroups:  []string{"default"},
		AdminAddr:    "127.0.0.1:9310",
		DrainTimeout: Duration(30 * time.Second),
		Coordination: CoordinationEtcd,
		S3Coord: S3CoordConfig{
			PollMin: Duration(s3coord.DefaultMinPollInterval),
			PollMax: Duration(s3coord.DefaultMaxPollInterval),
		},
		Etcd: EtcdConfig{
			DialTimeout:    Duration(5 * time.Second),
			RequestTimeout: Duration(5 * time.Second),
		},
		// No S3 region: an empty one follows the AWS chain (S3Config.Region).
		S3: S3Config{RequestTimeout: Duration(10 * time.Second)},
		// The lease intervals, the detach margin and the lock refresh stay
		// zero: they follow lease.ttl (WithDefaults).
		Lease: LeaseConfig{TTL: Duration(sc.LeaseTTL)},
		Detachment: DetachmentConfig{
			Mode:              string(sc.Detachment.Mode),
			RecoverWindow:     Duration(sc.Detachment.RecoverWindow),
			FailureThreshold:  sc.Detachment.KeepAliveFailureThreshold,
			StorageErrorGrace: Duration(sc.Detachment.StorageErrorGrace),
		},
		Sharding: ShardingConfig{
			RebalanceDebounce:    Duration(sc.RebalanceDebounce),
			RebalanceInterval:    Duration(sc.RebalanceInterval),
			AcquireRetryInterval: Duration(sc.AcquireRetryInterval),
			AcquireRetryWindow:   Duration(sc.AcquireRetryWindow),
			InterruptTimeout:     Duration(sc.InterruptTimeout),
		},
		Entity: EntityConfig{
			ReconcileInterval:      Duration(ec.ReconcileInterval),
			ReconcileMaxInterval:   Duration(ec.ReconcileMaxInterval),
			TaskLease:              Duration(ec.TaskLease),
			MaxConcurrentPerShard:  ec.MaxConcurrentPerShard,
			MaxConcurrentPerRunner: ec.MaxConcurrentPerRunner,
			MaxIdle:                Duration(ec.MaxIdle),
			MaxResident:            ec.MaxResident,
			MaxInputSize:           256 << 10,
			SendTimeout:            Duration(ec.SendTimeout),
			TaskRetention:          Duration(ec.TaskRetention),
			TaskSweepInterval:      Duration(ec.TaskSweepInterval),
			MaxStateSize:           ec.MaxStateSize,
		},
		Call: CallConfig{
			Addr:           "127.0.0.1:0",
			Timeout:        Duration(30 * time.Second),
			MaxMessageSize: 4 << 20,
		},
		Log: LogConfig{Level: "info", Format: "text"},
	}
}

var badIDChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func sanitizeID(s string) string {
	s = strings.Trim(badIDChars.ReplaceAllString(s, "-"), "-._")
	if s == "" {
		return "runner"
	}
	return s
}

// WithDefaults returns c with every key that follows another filled in,
// where it is zero: the keep-alive interval and timeout, the detach margin
// and the lock refresh follow lease.ttl (detachment.DeriveFromLease, the
// one rule every component applies), advertise_addr follows admin_addr
// when its host is a specific one. Load and New apply it, and so do
// Validate and the component configs, so that a Config built by hand in
// an embedding service gets the same values and checks as one loaded from
// a file.
func (c Config) WithDefaults() Config {
	d := detachment.DeriveFromLease(c.Lease.TTL.Std())
	if c.Lease.KeepAliveInterval == 0 {
		c.Lease.KeepAliveInterval = Duration(d.KeepAliveInterval)
	}
	if c.Lease.KeepAliveTimeout == 0 {
		c.Lease.KeepAliveTimeout = Duration(d.KeepAliveTimeout)
	}
	if c.Detachment.Margin == 0 {
		c.Detachment.Margin = Duration(d.DetachMargin)
	}
	if c.Sharding.LockRefreshInterval == 0 {
		c.Sharding.LockRefreshInterval = Duration(d.LockRefreshInterval)
	}
	// An unspecified admin host is not copied: New derives the host to
	// advertise (advertise.go).
	if host, _, err := net.SplitHostPort(c.AdminAddr); c.AdvertiseAddr == "" && (err != nil || !unspecifiedHost(host)) {
		c.AdvertiseAddr = c.AdminAddr
	}
	return c
}

// ShardingConfig returns the sharding.Config the runner runs with.
func (c Config) ShardingConfig() sharding.Config {
	c = c.WithDefaults()
	return sharding.Config{
		LeaseTTL:             c.Lease.TTL.Std(),
		KeepAliveInterval:    c.Lease.KeepAliveInterval.Std(),
		KeepAliveTimeout:     c.Lease.KeepAliveTimeout.Std(),
		Detachment:           c.Detachment.Machine(),
		RebalanceDebounce:    c.Sharding.RebalanceDebounce.Std(),
		RebalanceInterval:    c.Sharding.RebalanceInterval.Std(),
		LockRefreshInterval:  c.Sharding.LockRefreshInterval.Std(),
		AcquireRetryInterval: c.Sharding.AcquireRetryInterval.Std(),
		AcquireRetryWindow:   c.Sharding.AcquireRetryWindow.Std(),
		InterruptTimeout:     c.Sharding.InterruptTimeout.Std(),
		ProbeInterval:        500 * time.Millisecond,
	}
}

// Machine returns the detachment.Config these settings describe.
func (d DetachmentConfig) Machine() detachment.Config {
	return detachment.Config{
		Mode:                      detachment.Mode(d.Mode),
		DetachMargin:              d.Margin.Std(),
		RecoverWindow:             d.RecoverWindow.Std(),
		KeepAliveFailureThreshold: d.FailureThreshold,
		StorageErrorGrace:         d.StorageErrorGrace.Std(),
	}
}

// EntityConfig returns the entity.Config the runner runs with.
func (c Config) EntityConfig() entity.Config {
	ec := entity.DefaultConfig()
	ec.ReconcileInterval = c.Entity.ReconcileInterval.Std()
	ec.ReconcileMaxInterval = c.Entity.ReconcileMaxInterval.Std()
	ec.TaskLease = c.Entity.TaskLease.Std()
	ec.MaxConcurrentPerShard = c.Entity.MaxConcurrentPerShard
	ec.MaxConcurrentPerRunner = c.Entity.MaxConcurrentPerRunner
	ec.MaxIdle = c.Entity.MaxIdle.Std()
	ec.MaxResident = c.Entity.MaxResident
	ec.SendTimeout = c.Entity.SendTimeout.Std()
	ec.TaskRetention = c.Entity.TaskRetention.Std()
	ec.TaskSweepInterval = c.Entity.TaskSweepInterval.Std()
	ec.MaxStateSize = c.Entity.MaxStateSize
	// Whether a task left running may be taken over at once is decided per
	// claim, from the promise its holder recorded (task.Claim.Enforced),
	// not from this runner's mode: modes change at run time and differ
	// across a staged rollout.
	ec.InterruptTimeout = c.Sharding.InterruptTimeout.Std()
	return ec
}
